package proxy

import (
	"encoding/binary"
	"fmt"
	"net"
)

// proxyHeader is the PROXY protocol v2 header announcing a connection from
// src to dst (https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt,
// section 2.2): the signature, version 2 with the PROXY command, the
// address family and TCP, and the two addresses and ports.
func proxyHeader(src, dst net.Addr) ([]byte, error) {
	s, ok1 := src.(*net.TCPAddr)
	d, ok2 := dst.(*net.TCPAddr)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("PROXY protocol: not a TCP connection (%v to %v)", src, dst)
	}
	h := []byte("\r\n\r\n\x00\r\nQUIT\n")
	h = append(h, 0x21) // version 2, PROXY
	sIP, dIP := s.IP.To4(), d.IP.To4()
	if sIP == nil || dIP == nil {
		sIP, dIP = s.IP.To16(), d.IP.To16()
		h = append(h, 0x21) // TCP over IPv6
		h = binary.BigEndian.AppendUint16(h, 36)
	} else {
		h = append(h, 0x11) // TCP over IPv4
		h = binary.BigEndian.AppendUint16(h, 12)
	}
	h = append(h, sIP...)
	h = append(h, dIP...)
	h = binary.BigEndian.AppendUint16(h, uint16(s.Port))
	return binary.BigEndian.AppendUint16(h, uint16(d.Port)), nil
}
