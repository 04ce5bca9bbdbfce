package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/mdlayher/vsock"
	"github.com/prometheus/exporter-toolkit/web"
	"golang.org/x/net/netutil"
)

// Listen opens the listeners exporter-toolkit's web.ListenAndServe would
// open for the same flags (systemd socket activation, vsock://, TCP), each
// capped at maxConns open connections; 0 leaves them uncapped. The toolkit
// takes no listener wrapper, so the daemon opens them itself and hands them
// to web.ServeMultiple, which still applies the web config (TLS, basic auth).
//
// A capped listener stops accepting at the cap: further connections wait in
// the kernel's accept queue, holding none of the daemon's file descriptors,
// until an open one closes. Without the cap, every connection a client opens
// (5,000 idle ones in issue 15) costs a descriptor and memory, and past the
// descriptor limit accept4 and the collectors' own opens of /proc and /sys
// fail.
func Listen(flags *web.FlagConfig, maxConns int, log *slog.Logger) ([]net.Listener, error) {
	ls, err := listen(flags, log)
	if err != nil {
		return nil, err
	}
	if maxConns > 0 {
		for i, l := range ls {
			ls[i] = netutil.LimitListener(l, maxConns)
		}
	}
	return ls, nil
}

func listen(flags *web.FlagConfig, log *slog.Logger) ([]net.Listener, error) {
	if flags.WebSystemdSocket != nil && *flags.WebSystemdSocket {
		log.Info("Listening on systemd activated listeners instead of port listeners.")
		all, err := activation.Listeners()
		if err != nil {
			return nil, err
		}
		var ls []net.Listener
		for _, l := range all {
			if l != nil { // a passed descriptor that is not a listening socket
				ls = append(ls, l)
			}
		}
		if len(ls) == 0 {
			return nil, errors.New("no socket activation file descriptors found")
		}
		return ls, nil
	}
	if flags.WebListenAddresses == nil || len(*flags.WebListenAddresses) == 0 {
		return nil, web.ErrNoListeners
	}
	var ls []net.Listener
	closeAll := func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}
	for _, address := range *flags.WebListenAddresses {
		var l net.Listener
		var err error
		if strings.HasPrefix(address, "vsock://") {
			var port uint32
			if port, err = vsockPort(address); err == nil {
				l, err = vsock.Listen(port, nil)
			}
		} else {
			l, err = net.Listen("tcp", address)
		}
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("listen on %s: %w", address, err)
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// vsockPort reads the port of vsock://:PORT as exporter-toolkit does.
func vsockPort(address string) (uint32, error) {
	u, err := url.Parse(address)
	if err != nil {
		return 0, err
	}
	_, p, err := net.SplitHostPort(u.Host)
	if err != nil {
		return 0, err
	}
	port, err := strconv.ParseUint(p, 10, 32)
	if err != nil {
		return 0, err
	}
	return uint32(port), nil
}
