//go:build !linux

package sockdiag

import (
	"context"
	"errors"
	"runtime"
)

// Dump needs Linux's NETLINK_SOCK_DIAG; elsewhere it always fails.
func Dump(context.Context, []PortPair, func(*Socket) error) (Stats, error) {
	return Stats{}, errors.New("sock_diag: needs Linux, running on " + runtime.GOOS)
}
