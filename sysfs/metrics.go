package sysfs

import (
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Collector is a prometheus.Collector over the attribute tree: every scrape
// reads the attributes marked as metrics (Attr.Metric) live, as the tree
// shows them. Per device:
//
//   - devices/<dev>/<attr> → mhi_<attr>{device}: mru and mtu
//     (mhi_mru_bytes, mhi_mtu_bytes), timeout_ms (mhi_timeout_seconds);
//   - stats/mhi/<attr> → mhi_controller_<attr>{device}; stats/<group>/<attr>
//     → mhi_<group>_<attr>{device} (net, session, modem);
//     stats/ports/<port>/<attr> → mhi_port_<attr>{device, port};
//     stats/sessions/<N>/<attr> → mhi_sessions_<attr>{device, session},
//     stats/modem_sessions/<N>/<attr> → mhi_modem_sessions_<attr>{device,
//     session};
//   - channels/<num>_<name>/<attr> → mhi_channel_<attr>{device, channel,
//     channel_name};
//   - mhi_device_info{device, model, state, ee, pm_state} 1, and with a
//     session mhi_session_info{device, state, protocol, apn, ip_type, ipv4,
//     ipv6, interface} 1 and mhi_session_up{device} (session 0), and per
//     session sessions/<N>/ mhi_sessions_info{device, session, …} 1 and
//     mhi_sessions_up{device, session}.
//
// Counters end in _total, values are in base units (a name ending in
// _bytes, or _seconds for attributes kept in milliseconds), and each
// family's HELP text is its attribute's Doc. The set of families changes
// as devices come and go, so the collector is unchecked (Describe sends
// nothing).
type Collector struct {
	tree *Tree

	mu    sync.Mutex
	descs map[string]*prometheus.Desc
}

// NewCollector returns a collector over t.
func NewCollector(t *Tree) *Collector {
	return &Collector{tree: t, descs: map[string]*prometheus.Desc{}}
}

// Describe sends nothing: the collector is unchecked.
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect reads the tree and sends one metric per exposed attribute.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	devs, err := c.tree.LookupDir("devices")
	if err != nil {
		return
	}
	for _, dev := range devs.Dirs() {
		c.collectDevice(ch, dev)
	}
}

// Label names.
var (
	deviceLabels  = []string{"device"}
	portLabels    = []string{"device", "port"}
	channelLabels = []string{"device", "channel", "channel_name"}
	infoLabels    = []string{"device", "model", "state", "ee", "pm_state"}
	sessionLabels = []string{"device", "state", "protocol", "apn", "ip_type", "ipv4", "ipv6", "interface"}
	// sessionsLabels label the families of sessions/<N> and
	// stats/sessions/<N>.
	sessionsLabels     = []string{"device", "session"}
	sessionsInfoLabels = []string{"device", "session", "state", "protocol", "apn", "ip_type", "ipv4", "ipv6", "interface"}
)

// Help texts of the families that are not one attribute each.
const (
	deviceInfoHelp  = "the device's model and state: MHI state, execution environment and host power-management state (pm_state RECOVERY_FAILED: recovery gave up); always 1"
	sessionInfoHelp = "the device's data session: state, control protocol, APN, IP type, addresses and interface; always 1"
	sessionUpHelp   = "1 while the device's data session is connected, else 0"
	// SessionsInfoHelp and SessionsUpHelp are the HELP texts of
	// mhi_sessions_info and mhi_sessions_up.
	SessionsInfoHelp = "one data session of the device, by number: state, control protocol, APN, IP type, addresses and interface; always 1"
	SessionsUpHelp   = "1 while the device's data session of this number is connected, else 0"
)

func (c *Collector) collectDevice(ch chan<- prometheus.Metric, dev *Dir) {
	dl := []string{dev.Name}
	info := map[string]string{}
	for _, a := range dev.Attrs() {
		switch a.Name {
		case "model", "state", "ee", "pm_state":
			info[a.Name], _ = a.Read()
		}
		c.attrMetric(ch, "", a, deviceLabels, dl)
	}
	c.send(ch, "mhi_device_info", deviceInfoHelp, prometheus.GaugeValue, 1, infoLabels,
		dev.Name, info["model"], info["state"], info["ee"], info["pm_state"])
	if stats, ok := dev.Dir("stats"); ok {
		c.collectStats(ch, dev.Name, stats)
	}
	if chans, ok := dev.Dir("channels"); ok {
		for _, chd := range chans.Dirs() {
			num, name, _ := strings.Cut(chd.Name, "_")
			for _, a := range chd.Attrs() {
				c.attrMetric(ch, "channel_", a, channelLabels, []string{dev.Name, num, name})
			}
		}
	}
	c.collectSessions(ch, dev)
}

// collectStats sends the counter groups under stats/.
func (c *Collector) collectStats(ch chan<- prometheus.Metric, dev string, stats *Dir) {
	dl := []string{dev}
	for _, group := range stats.Dirs() {
		prefix := group.Name + "_"
		switch group.Name {
		case "mhi":
			prefix = "controller_"
		case "ports":
			for _, port := range group.Dirs() {
				for _, a := range port.Attrs() {
					c.attrMetric(ch, "port_", a, portLabels, []string{dev, port.Name})
				}
			}
			continue
		case "sessions", "modem_sessions":
			for _, sd := range group.Dirs() {
				for _, a := range sd.Attrs() {
					c.attrMetric(ch, prefix, a, sessionsLabels, []string{dev, sd.Name})
				}
			}
		}
		for _, a := range group.Attrs() {
			c.attrMetric(ch, prefix, a, deviceLabels, dl)
		}
	}
}

// collectSessions sends the info and up families of session/ and of
// each sessions/<N>/.
func (c *Collector) collectSessions(ch chan<- prometheus.Metric, dev *Dir) {
	if sess, ok := dev.Dir("session"); ok {
		v := stringAttrs(sess)
		c.send(ch, "mhi_session_info", sessionInfoHelp, prometheus.GaugeValue, 1, sessionLabels,
			dev.Name, v["state"], v["protocol"], v["apn"], v["ip_type"], v["ipv4"], v["ipv6"], v["interface"])
		c.send(ch, "mhi_session_up", sessionUpHelp, prometheus.GaugeValue, upValue(v["state"]), deviceLabels, dev.Name)
	}
	if sessions, ok := dev.Dir("sessions"); ok {
		for _, sd := range sessions.Dirs() {
			v := stringAttrs(sd)
			c.send(ch, "mhi_sessions_info", SessionsInfoHelp, prometheus.GaugeValue, 1, sessionsInfoLabels,
				dev.Name, sd.Name, v["state"], v["protocol"], v["apn"], v["ip_type"], v["ipv4"], v["ipv6"], v["interface"])
			c.send(ch, "mhi_sessions_up", SessionsUpHelp, prometheus.GaugeValue, upValue(v["state"]), sessionsLabels, dev.Name, sd.Name)
		}
	}
}

// stringAttrs reads d's readable String attributes.
func stringAttrs(d *Dir) map[string]string {
	v := map[string]string{}
	for _, a := range d.Attrs() {
		if a.Type == String && a.Readable() {
			v[a.Name], _ = a.Read()
		}
	}
	return v
}

// upValue is 1 for a connected session's state, else 0.
func upValue(state string) float64 {
	if state == "connected" {
		return 1
	}
	return 0
}

// attrMetric sends a's value as mhi_<prefix><name>, if a is a readable
// Uint attribute marked as a metric.
func (c *Collector) attrMetric(ch chan<- prometheus.Metric, prefix string, a *Attr, labels, values []string) {
	if a.Metric == NotAMetric || a.Type != Uint || !a.Readable() {
		return
	}
	s, err := a.Read()
	if err != nil {
		return
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return
	}
	v := float64(n)
	if a.Unit == UnitMilliseconds {
		v /= 1000
	}
	vt := prometheus.GaugeValue
	if a.Metric == Counter {
		vt = prometheus.CounterValue
	}
	c.send(ch, MetricName(prefix, a), a.Doc, vt, v, labels, values...)
}

// MetricName is the Prometheus name of attribute a shown with prefix
// ("controller_", "net_", "port_", "channel_"… or "" for a device
// attribute): mhi_<prefix><name>, the unit in base units (_bytes;
// _seconds for milliseconds), and _total for a counter.
func MetricName(prefix string, a *Attr) string {
	part := a.Name
	if a.MetricName != "" {
		part = a.MetricName
	}
	switch a.Unit {
	case UnitMilliseconds:
		part = strings.TrimSuffix(part, "_ms") + "_seconds"
	case UnitBytes:
		if part != "bytes" && !strings.HasSuffix(part, "_bytes") {
			part += "_bytes"
		}
	}
	name := "mhi_" + prefix + part
	if a.Metric == Counter {
		name += "_total"
	}
	return sanitizeName(name)
}

// send sends one sample of the family name, creating its descriptor on
// first use. Label values are made valid UTF-8 (a modem's strings are not
// trusted to be).
func (c *Collector) send(ch chan<- prometheus.Metric, name, help string, vt prometheus.ValueType, v float64, labels []string, values ...string) {
	c.mu.Lock()
	d, ok := c.descs[name]
	if !ok {
		d = prometheus.NewDesc(name, help, labels, nil)
		c.descs[name] = d
	}
	c.mu.Unlock()
	for i, s := range values {
		values[i] = strings.ToValidUTF8(s, "\uFFFD")
	}
	m, err := prometheus.NewConstMetric(d, vt, v, values...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}

// sanitizeName keeps only the characters Prometheus allows in a name.
func sanitizeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// NewRegistry returns a registry holding the tree's collector, the Go
// runtime collector and the process collector.
func (t *Tree) NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(t), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// MetricsHandler serves the tree's metrics, with the Go runtime's and the
// process's, in the Prometheus text format or, when the scraper asks for
// it, in OpenMetrics (promhttp). The handler counts its own requests
// (promhttp_metric_handler_requests_total).
func (t *Tree) MetricsHandler() http.Handler {
	reg := t.NewRegistry()
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		EnableOpenMetrics: true,
		ErrorHandling:     promhttp.ContinueOnError,
		Registry:          reg,
	})
	return promhttp.InstrumentMetricHandler(reg, h)
}
