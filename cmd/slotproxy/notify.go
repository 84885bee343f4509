package main

import (
	"fmt"
	"net"
	"os"
	"strings"
)

// notify sends state to systemd's notification socket ($NOTIFY_SOCKET), as
// sd_notify(3) does, for a unit with Type=notify: "READY=1" once serve
// accepts clients, "RELOADING=1" and "READY=1" around a SIGHUP reload,
// "STOPPING=1" when shutdown begins, and "STATUS=…" lines that systemctl
// status shows. Without $NOTIFY_SOCKET (not started by systemd, or a unit
// of another type) it does nothing and returns nil. A socket name starting
// with "@" is in the abstract namespace.
func notify(state string) error {
	socket := os.Getenv("NOTIFY_SOCKET")
	if socket == "" {
		return nil
	}
	if strings.HasPrefix(socket, "@") {
		socket = "\x00" + socket[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("NOTIFY_SOCKET: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("NOTIFY_SOCKET: %w", err)
	}
	return nil
}
