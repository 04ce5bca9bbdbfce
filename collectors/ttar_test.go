package collectors

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// extractTTAR unpacks a ttar archive (the text archive node_exporter and
// procfs keep their sysfs fixtures in, github.com/ideaship/ttar) under dst.
// Its entries are "Directory: p", "Path: p" then "Lines: n" and n lines of
// content (a line ending in an unescaped EOF has no newline; NULLBYTE is
// a zero byte), or "Path: p" then "SymlinkTo: target", each followed by
// "Mode: m"; lines starting with # separate them. A path or a symlink that
// would leave dst is refused: the archive is test data, not trusted to
// place files.
func extractTTAR(r io.Reader, dst string) error {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	var path string
	for n := 1; s.Scan(); n++ {
		line := s.Text()
		key, value, _ := strings.Cut(line, ": ")
		switch {
		case strings.HasPrefix(line, "#") || line == "":
		case key == "Directory" || key == "Path":
			full, err := ttarTarget(dst, value)
			if err != nil {
				return fmt.Errorf("line %d: %w", n, err)
			}
			path = full
			if key == "Directory" {
				if err := os.MkdirAll(path, 0o755); err != nil {
					return err
				}
			}
		case key == "Lines":
			lines, err := strconv.Atoi(value)
			if err != nil || path == "" {
				return fmt.Errorf("line %d: bad %q", n, line)
			}
			var content strings.Builder
			for i := 0; i < lines; i++ {
				if !s.Scan() {
					return fmt.Errorf("line %d: archive ends inside %s", n, path)
				}
				n++
				content.WriteString(ttarLine(s.Text()))
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(path, []byte(content.String()), 0o644); err != nil {
				return err
			}
		case key == "SymlinkTo":
			if filepath.IsAbs(value) {
				return fmt.Errorf("line %d: absolute symlink %s -> %s", n, path, value)
			}
			if _, err := ttarTarget(dst, filepath.Join(filepath.Dir(strings.TrimPrefix(path, dst+"/")), value)); err != nil {
				return fmt.Errorf("line %d: symlink %s: %w", n, path, err)
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(value, path); err != nil {
				return err
			}
		case key == "Mode":
			// Modes are kept as the fixture tree is written: readable.
		default:
			return fmt.Errorf("line %d: unknown entry %q", n, line)
		}
	}
	return s.Err()
}

// ttarTarget is rel under dst, refused when it would leave dst.
func ttarTarget(dst, rel string) (string, error) {
	clean := filepath.Clean(rel)
	if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("path %q leaves the archive's root", rel)
	}
	return filepath.Join(dst, clean), nil
}

// ttarLine decodes one content line: an unescaped EOF ends the file
// without a newline, NULLBYTE is a zero byte, and a backslash escapes
// either word.
func ttarLine(line string) string {
	newline := "\n"
	if strings.HasSuffix(line, "EOF") && !strings.HasSuffix(line, `\EOF`) {
		line, newline = strings.TrimSuffix(line, "EOF"), ""
	}
	const null = "NULLBYTE"
	var b strings.Builder
	for {
		i := strings.Index(line, null)
		if i < 0 {
			break
		}
		if i > 0 && line[i-1] == '\\' {
			b.WriteString(line[:i-1] + null)
		} else {
			b.WriteString(line[:i] + "\x00")
		}
		line = line[i+len(null):]
	}
	b.WriteString(line)
	return strings.ReplaceAll(b.String(), `\EOF`, "EOF") + newline
}
