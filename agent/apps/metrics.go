package apps

import (
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sitecon/sitecon/agent/localapi"
)

// Metrics are the agent's Prometheus metrics, on their own registry so the
// agent exports only what it means: its own figures, and what it costs the
// device it runs on for days (the process's resident memory and CPU, the
// Go heap and the collector's target, GCPercent in package agent).
type Metrics struct {
	Registry          *prometheus.Registry
	Apps              *prometheus.GaugeVec
	Migrations        prometheus.Counter
	DetectionLatency  prometheus.Histogram
	Leader            prometheus.Gauge
	APIErrors         prometheus.Counter
	FailoverActions   *prometheus.CounterVec
	PlacementApplies  prometheus.Counter
	AppConfigFailures prometheus.Gauge
}

// NewMetrics registers the agent's metrics.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Apps: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sitecon_apps",
			Help: "Apps in the config by kube status as seen from this node."}, []string{"kube_status"}),
		Migrations: prometheus.NewCounter(prometheus.CounterOpts{Name: "sitecon_migrations_detected_total",
			Help: "Apps this node saw start running on a different node than before."}),
		DetectionLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sitecon_detection_latency_seconds",
			Help:    "From a watch notification to the app state published.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sitecon_stats_leader",
			Help: "1 while this node is the stats leader."}),
		APIErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "sitecon_api_errors_total",
			Help: "Failed writes to the API server (apply, delete, patch)."}),
		FailoverActions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sitecon_failover_actions_total",
			Help: "Failover verdicts acted on, by action."}, []string{"action"}),
		PlacementApplies: prometheus.NewCounter(prometheus.CounterOpts{Name: "sitecon_placement_applies_total",
			Help: "Server-side applies sent for apps, volumes and storage classes."}),
		AppConfigFailures: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sitecon_app_config_errors",
			Help: "App and volume files that do not parse or validate."}),
	}
	m.Registry.MustRegister(m.Apps, m.Migrations, m.DetectionLatency, m.Leader, m.APIErrors,
		m.FailoverActions, m.PlacementApplies, m.AppConfigFailures,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Serve serves /metrics on addr until the returned server is closed.
func (m *Metrics) Serve(addr string) (*http.Server, net.Addr, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	srv := localapi.NewServer(mux)
	go func() { _ = srv.Serve(l) }()
	return srv, l.Addr(), nil
}
