package hostfs

import (
	"fmt"
	"strings"
)

// Bracketed sysfs choices: a list of the values an attribute may take,
// the active one in brackets.

// ActiveChoice returns the bracketed value of a sysfs choice list such as
// transparent_hugepage/enabled ("always [madvise] never").
func ActiveChoice(s string) (string, error) {
	if v, ok := bracketed(strings.Fields(s)); ok {
		return v, nil
	}
	return "", fmt.Errorf("no [active] value in %q", strings.TrimSpace(s))
}

// ActiveScheduler picks the bracketed name of a queue/scheduler line
// ("none [mq-deadline] kyber bfq"). Old kernels print a bare "none" for
// queues that cannot have one.
func ActiveScheduler(line string) string {
	names := strings.Fields(line)
	if v, ok := bracketed(names); ok {
		return v
	}
	if len(names) == 1 {
		return names[0]
	}
	return ""
}

// bracketed returns the first word of the form [value].
func bracketed(words []string) (string, bool) {
	for _, w := range words {
		if len(w) > 2 && w[0] == '[' && w[len(w)-1] == ']' {
			return w[1 : len(w)-1], true
		}
	}
	return "", false
}
