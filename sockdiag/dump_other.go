//go:build !linux

package sockdiag

import (
	"context"
	"errors"
	"runtime"
)

// Dump needs Linux's NETLINK_SOCK_DIAG; elsewhere it always fails.
func Dump(context.Context, func(*Socket) error) (Stats, error) {
	return Stats{}, errors.New("sock_diag: needs Linux, running on " + runtime.GOOS)
}

// Lookup needs Linux's NETLINK_SOCK_DIAG; elsewhere it always fails.
func Lookup(context.Context, []SocketID, func(*Socket) error) (Stats, []SocketID, error) {
	return Stats{}, nil, errors.New("sock_diag: needs Linux, running on " + runtime.GOOS)
}
