// Package kubeflakeprom exposes a kubeflake Client's counters (Client.Stats) as a
// Prometheus collector, under the names of clients/SPEC.md, section 5, and of the Python
// client's kubeflake.prometheus.ClientCollector. A module of its own, so that the client
// itself depends on nothing:
//
//	ids, err := kubeflake.New(kubeflake.Settings{})
//	prometheus.MustRegister(kubeflakeprom.NewCollector(ids, "default"))
package kubeflakeprom

import (
	"sort"

	kubeflake "github.com/kubeflake/kubeflake/clients/go"
	"github.com/prometheus/client_golang/prometheus"
)

// StatsSource is what the collector reads: a *kubeflake.Client.
type StatsSource interface {
	Stats() kubeflake.Stats
}

// Collector is a prometheus.Collector of one client's counters, each with the label
// client="<name>" (so one process may register several clients).
type Collector struct {
	source StatsSource
	descs  descs
}

type descs struct {
	depth, batch, ids, refills, refillSeconds, refillErrors, waits, waitSeconds, expired, direct, errors *prometheus.Desc
}

// NewCollector makes a collector of c's counters, labelled client=name.
func NewCollector(c StatsSource, name string) *Collector {
	labels := prometheus.Labels{"client": name}
	d := func(metric, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(metric, help, variable, labels)
	}
	return &Collector{source: c, descs: descs{
		depth:         d("kubeflake_client_buffer_depth", "IDs in the prefetch buffer now."),
		batch:         d("kubeflake_client_batch_size", "The size of the next refill."),
		ids:           d("kubeflake_client_ids_total", "IDs handed out from the buffer."),
		refills:       d("kubeflake_client_refills_total", "Successful refills of the buffer."),
		refillSeconds: d("kubeflake_client_refill_seconds_total", "Time spent in successful refills."),
		refillErrors:  d("kubeflake_client_refill_errors_total", "Refills that failed."),
		waits:         d("kubeflake_client_waits_total", "NextID calls that found the buffer empty and waited."),
		waitSeconds:   d("kubeflake_client_wait_seconds_total", "Time NextID calls spent waiting for a refill."),
		expired:       d("kubeflake_client_expired_total", "Buffered IDs dropped as older than MaxAge."),
		direct:        d("kubeflake_client_direct_requests_total", "Requests that bypass the buffer."),
		errors:        d("kubeflake_client_errors_total", "Errors returned to the app, by kind.", "kind"),
	}}
}

// Describe sends the descriptions of every metric the collector gives.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	d := c.descs
	for _, desc := range []*prometheus.Desc{d.depth, d.batch, d.ids, d.refills, d.refillSeconds, d.refillErrors, d.waits, d.waitSeconds, d.expired, d.direct, d.errors} {
		ch <- desc
	}
}

// Collect reads the client's Stats once and sends every metric from that one reading.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.source.Stats()
	d := c.descs
	gauge := func(desc *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v)
	}
	counter := func(desc *prometheus.Desc, v float64, label ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v, label...)
	}
	gauge(d.depth, float64(s.BufferDepth))
	gauge(d.batch, float64(s.BatchSize))
	counter(d.ids, float64(s.IDs))
	counter(d.refills, float64(s.Refills))
	counter(d.refillSeconds, s.RefillTime.Seconds())
	counter(d.refillErrors, float64(s.RefillErrors))
	counter(d.waits, float64(s.Waits))
	counter(d.waitSeconds, s.WaitTime.Seconds())
	counter(d.expired, float64(s.Expired))
	counter(d.direct, float64(s.Direct))
	kinds := make([]string, 0, len(s.Errors))
	for k := range s.Errors {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		counter(d.errors, float64(s.Errors[kubeflake.Kind(k)]), k)
	}
}
