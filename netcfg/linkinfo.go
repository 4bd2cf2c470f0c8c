package netcfg

// InterfaceMTU is the interface's MTU, as netlink reports it.
func InterfaceMTU(iface string) (int, error) {
	l, err := link(iface)
	if err != nil {
		return 0, err
	}
	return l.Attrs().MTU, nil
}
