# The Linux side of the SYS_ERR comparison (docs/FIDELITY.md §10): run by
# 'mhictl lab run --serve-args "--transcript FILE" syserr.sh' in the guest
# once Linux's mhi_pci_generic and mhi_net have the modem. Pings the mock's
# gateway five times, injects SYS_ERR (the mock raises it both ways, the
# MHISTATUS interrupt and the state-change event), waits for the data
# interface to come back (a new ifindex: mhi_net re-creates it), gives it
# its address again, pings five times and ends; the guest powers off.
ping -c 5 -W 5 "$LAB_PEER"
idx=$(cat /sys/class/net/$LAB_NETDEV/ifindex)
lab-inject sys-err
i=0
while [ $i -lt 300 ]; do
	n=$(cat /sys/class/net/$LAB_NETDEV/ifindex 2>/dev/null)
	[ -n "$n" ] && [ "$n" != "$idx" ] && break
	sleep 0.1; i=$((i+1))
done
echo "SYSERR $LAB_NETDEV back after $i tenths (ifindex $idx -> $n)"
ip link set "$LAB_NETDEV" up
ip addr add "$LAB_ADDR" peer "$LAB_PEER" dev "$LAB_NETDEV"
ping -c 5 -W 5 "$LAB_PEER"
