package hostfs

import (
	"errors"
	"io/fs"
	"strings"
)

// The kernel command line, /proc/cmdline: the boot parameters that shape
// how the CPUs serve the GPUs (isolcpus=, nohz_full=, the C-state caps).

// procCmdlineBytes bounds /proc/cmdline: COMMAND_LINE_SIZE is 2 KiB on
// x86 and at most 4 KiB elsewhere.
const procCmdlineBytes = 16 << 10

// KernelCmdline is the boot parameters the audit reads; a parameter not
// given is empty.
type KernelCmdline struct {
	// Isolcpus and NohzFull are the values of isolcpus= and nohz_full=
	// as given (isolcpus may carry flags: "managed_irq,domain,2-7").
	Isolcpus, NohzFull string
	// IntelIdleMaxCstate and ProcessorMaxCstate are intel_idle.max_cstate=
	// and processor.max_cstate=.
	IntelIdleMaxCstate, ProcessorMaxCstate string
}

// Cmdline reads /proc/cmdline; absent gives the zero value.
func (f FS) Cmdline() (KernelCmdline, error) {
	c, err := readParsed(f, f.ProcPath("cmdline"), procCmdlineBytes, func(_ string, b []byte) (KernelCmdline, error) {
		return ParseCmdline(string(b)), nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return KernelCmdline{}, nil
	}
	return c, err
}

// ParseCmdline picks the parameters kept from a command line; the last of
// a repeated parameter wins, as in the kernel. Quoted values ("a b") are
// not split.
func ParseCmdline(s string) KernelCmdline {
	var c KernelCmdline
	dst := map[string]*string{
		"isolcpus": &c.Isolcpus, "nohz_full": &c.NohzFull,
		"intel_idle.max_cstate": &c.IntelIdleMaxCstate, "processor.max_cstate": &c.ProcessorMaxCstate,
	}
	for _, p := range cmdlineFields(s) {
		k, v, ok := strings.Cut(p, "=")
		if d, kept := dst[k]; kept && ok {
			*d = strings.Trim(v, `"`)
		}
	}
	return c
}

// cmdlineFields splits at spaces outside double quotes, byte by byte: the
// line need not be UTF-8, and a value must come back as written.
func cmdlineFields(s string) []string {
	var out []string
	start, quoted := -1, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			quoted = !quoted
		case !quoted && (c == ' ' || c == '\n' || c == '\t'):
			if start >= 0 {
				out = append(out, s[start:i])
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}

// IsolcpusList is the CPU list of an isolcpus= value, its flags
// (nohz, domain, managed_irq) dropped.
func IsolcpusList(v string) ([]int, error) {
	parts := strings.Split(v, ",")
	i := 0
	for i < len(parts) && (parts[i] == "nohz" || parts[i] == "domain" || parts[i] == "managed_irq") {
		i++
	}
	return ParseCPUList(strings.Join(parts[i:], ","))
}
