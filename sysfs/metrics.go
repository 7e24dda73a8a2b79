package sysfs

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// WriteMetrics writes every numeric attribute of the tree in the Prometheus
// text exposition format (version 0.0.4): per device, the counters of
// stats/mhi and stats/net as mhi_<group>_<name>{device="…"}, the channel
// counters as mhi_channel_<name>{device, channel, name}, mru, mtu and
// timeout_ms as gauges, and the state as mhi_device_info{device, state,
// ee, model, pm_state} 1 (pm_state RECOVERY_FAILED: recovery gave up; the
// gauge mhi_mhi_recovery_failed is 1 then too). Values are read live from the same counters the tree shows.
func (t *Tree) WriteMetrics(w io.Writer) error {
	type sample struct{ labels, value string }
	series := map[string][]sample{}
	kinds := map[string]string{}
	add := func(name, kind, labels, value string) {
		series[name] = append(series[name], sample{labels, value})
		kinds[name] = kind
	}
	devs, err := t.LookupDir("devices")
	if err != nil {
		return err
	}
	for _, dev := range devs.Dirs() {
		dl := fmt.Sprintf(`device=%q`, dev.Name)
		info := map[string]string{}
		for _, a := range dev.Attrs() {
			if !a.Readable() {
				continue
			}
			v, err := a.Read()
			if err != nil {
				continue
			}
			switch a.Name {
			case "mru", "mtu", "timeout_ms":
				add("mhi_"+a.Name, "gauge", dl, v)
			case "state", "ee", "model", "pm_state":
				info[a.Name] = v
			}
		}
		add("mhi_device_info", "gauge", fmt.Sprintf(`%s,state=%q,ee=%q,model=%q,pm_state=%q`, dl, info["state"], info["ee"], info["model"], info["pm_state"]), "1")
		if stats, ok := dev.Dir("stats"); ok {
			for _, group := range stats.Dirs() {
				for _, a := range group.Attrs() {
					if a.Type != Uint {
						continue
					}
					v, err := a.Read()
					if err != nil {
						continue
					}
					add(metricName("mhi_"+group.Name+"_"+a.Name), kindOf(a.Name), dl, v)
				}
				groupDirMetrics(add, dl, group)
			}
		}
		sessionMetrics(add, dl, dev)
		if chans, ok := dev.Dir("channels"); ok {
			for _, ch := range chans.Dirs() {
				num, name, _ := strings.Cut(ch.Name, "_")
				cl := fmt.Sprintf(`%s,channel=%q,name=%q`, dl, num, name)
				for _, a := range ch.Attrs() {
					if a.Type != Uint {
						continue
					}
					v, err := a.Read()
					if err != nil {
						continue
					}
					add(metricName("mhi_channel_"+a.Name), kindOf(a.Name), cl, v)
				}
			}
		}
	}
	names := make([]string, 0, len(series))
	for n := range series {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if _, err := fmt.Fprintf(w, "# TYPE %s %s\n", n, kinds[n]); err != nil {
			return err
		}
		for _, s := range series[n] {
			if _, err := fmt.Fprintf(w, "%s{%s} %s\n", n, s.labels, s.value); err != nil {
				return err
			}
		}
	}
	return nil
}

// groupDirMetrics adds the counters of the subdirectories of a stats
// group (stats/ports/<port>/…) as mhi_<group without the plural
// s>_<name>{device, <group without s>="<subdirectory>"}: per-port
// counters are mhi_port_ul_messages{device="mhi0",port="wwan0mbim0"}.
func groupDirMetrics(add func(name, kind, labels, value string), dl string, group *Dir) {
	what := strings.TrimSuffix(group.Name, "s")
	for _, sub := range group.Dirs() {
		ll := fmt.Sprintf(`%s,%s=%q`, dl, metricName(what), sub.Name)
		for _, a := range sub.Attrs() {
			if a.Type != Uint {
				continue
			}
			v, err := a.Read()
			if err != nil {
				continue
			}
			add(metricName("mhi_"+what+"_"+a.Name), kindOf(a.Name), ll, v)
		}
	}
}

// sessionMetrics adds mhi_session_info{device, state, protocol, apn,
// ip_type, ipv4, ipv6, interface} 1 and mhi_session_up{device} (1 while
// connected) for a device with a session/ directory.
func sessionMetrics(add func(name, kind, labels, value string), dl string, dev *Dir) {
	sess, ok := dev.Dir("session")
	if !ok {
		return
	}
	v := map[string]string{}
	for _, a := range sess.Attrs() {
		if a.Type == String && a.Readable() {
			v[a.Name], _ = a.Read()
		}
	}
	add("mhi_session_info", "gauge", fmt.Sprintf(`%s,state=%q,protocol=%q,apn=%q,ip_type=%q,ipv4=%q,ipv6=%q,interface=%q`,
		dl, v["state"], v["protocol"], v["apn"], v["ip_type"], v["ipv4"], v["ipv6"], v["interface"]), "1")
	up := "0"
	if v["state"] == "connected" {
		up = "1"
	}
	add("mhi_session_up", "gauge", dl, up)
}

// kindOf says whether a numeric attribute is a counter or a gauge.
func kindOf(name string) string {
	for _, g := range []string{"mru", "mtu", "pool_", "rx_posted", "high_water", "elements", "event_ring", "pending",
		"recovery_consecutive", "recovery_backoff", "recovery_failed", "connected", "session_active"} {
		if strings.Contains(name, g) {
			return "gauge"
		}
	}
	return "counter"
}

// metricName keeps only the characters Prometheus allows in a name.
func metricName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == ':') {
			b[i] = '_'
		}
	}
	return string(b)
}

// MetricsHandler serves WriteMetrics over HTTP.
func (t *Tree) MetricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		var b strings.Builder
		if err := t.WriteMetrics(&b); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
		_, _ = io.WriteString(w, b.String())
	})
}
