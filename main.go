// Command shortener is a URL shortener that is also a tutorial in performance
// engineering: POST /shorten turns a long URL into a seven-character code, and
// GET /{code} redirects to it. Each step of the repository's history changes one
// thing about how it stores and serves links, and measures what that changed.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// shutdownTimeout bounds the whole shutdown, from its start to run's
// return: in-flight requests finishing, the click queue's drain, the group
// commit's drain and closing the database share it, each stage taking what
// the ones before it left. Whatever is cut short is logged. A process
// manager should wait longer than this before a SIGKILL
// (deploy/replicas.sh waits 20 s; Docker's default is 10 s: set
// --stop-timeout).
const shutdownTimeout = 15 * time.Second

func main() {
	ctx := context.Background()
	var err error
	if len(os.Args) > 1 && os.Args[1] == "import" { // step 18: bulk import (import.go)
		err = runImport(ctx, os.Args[2:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	} else {
		err = run(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "shortener: %v\n", err)
		os.Exit(1)
	}
}

// run is the whole program. It takes everything main would reach for as a
// global (arguments, environment, output streams) so that a test can call it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	if embeddedSiteErr != nil {
		return fmt.Errorf("the page's files: %w", embeddedSiteErr)
	}
	log := newLogger(cfg.logFormat, stderr)
	for _, w := range cfg.warnings {
		log.Warn(w)
	}

	// One deadline over the whole shutdown, set by the first stage that
	// asks for it: after a signal, the server's; after an error, the first
	// deferred close. Only run's own goroutine calls it.
	var shutdownBy time.Time
	stage := func() (context.Context, context.CancelFunc) {
		if shutdownBy.IsZero() {
			shutdownBy = time.Now().Add(shutdownTimeout)
		}
		return context.WithDeadline(context.Background(), shutdownBy)
	}

	// Metrics: a registry of this run's own (never the global one, so that
	// a test can call run twice), served on a private listener opened
	// first, so that a port already taken fails the start.
	var m *metrics
	var metricsLn net.Listener
	if cfg.metricsAddr != "off" {
		m = newMetrics(prometheus.NewRegistry())
		if metricsLn, err = net.Listen("tcp", cfg.metricsAddr); err != nil {
			return fmt.Errorf("listen on %s (METRICS_ADDR): %w", cfg.metricsAddr, err)
		}
		defer metricsLn.Close() //nolint:errcheck // closed by the metrics server's Close first, if it started; a second Close only fails
	}

	// Open in order, close in reverse: each defer sits right after its
	// open, so the server stops first (below), then the click queue drains,
	// then Redis closes, then Postgres.
	store, closeStore, err := openStore(ctx, cfg, m, log)
	if err != nil {
		return err
	}
	defer func() {
		// Closing writes the creates still waiting for a group commit,
		// then closes the pool; against a database that does not answer,
		// either can wait for a connection's reply deadline.
		sctx, cancel := stage()
		defer cancel()
		if err := bounded(sctx, closeStore); err != nil {
			if sctx.Err() != nil {
				log.Error("shutdown deadline reached: store not closed, creates still queued not saved", "err", err)
				return
			}
			log.Error("close store", "err", err)
		}
	}()
	base := store // the store itself, before any cache
	if r, ok := store.(*replicaReads); ok {
		base = r.Store // clicks are written to the primary
	}
	if pg, ok := base.(*pgStore); ok {
		m.watchDB(pg.db)
		if pg.bg != nil {
			m.watchBackground(pg.bg)
		}
		if pg.reads != nil {
			m.watchLookupPool(pg.reads)
		}
		if cfg.codes == "sequence" {
			kctx, cancel := context.WithTimeout(ctx, migrateTimeout)
			cfg.codeSrc, err = newSequenceCodes(kctx, pg.db, cfg.pool.timeout)
			cancel()
			if err != nil {
				return err
			}
		}
	}
	log.Info("codes", "source", cfg.codes)
	var rdb *guardedRedis
	if cfg.redis != nil {
		rdb = openRedis(ctx, cfg.redis, sentinels{cfg.redisMaster, cfg.redisSentinels, cfg.redisSentinelUser, cfg.redisSentinelPassword}, cfg.redisTimeout, cfg.redisWaitReplicas, log)
		defer func() {
			if err := rdb.Close(); err != nil {
				log.Error("close redis", "err", err)
			}
		}()
		m.watchRedis(rdb.Client)
		m.register(rdb.collectors()...)
	}
	// The layers a lookup meets on its way to the store (wire.go). Their
	// goroutines stop after the HTTP server has (defers run in reverse),
	// and before Redis and Postgres close.
	pg, _ := base.(*pgStore)
	layers, err := buildLayers(ctx, cfg, store, pg, rdb, m, log)
	if err != nil {
		return err
	}
	defer layers.stop()
	store = layers.store
	var limiter *createLimiter
	if cfg.limits.createRate > 0 {
		limiter = newCreateLimiter(cfg.limits.createRate, cfg.limits.createBurst, rdb, cfg.redisPrefix, log)
		defer limiter.close()
	}
	log.Info("limits", "max_in_flight", cfg.limits.maxInFlight, "create_rate", cfg.limits.createRate,
		"create_burst", cfg.limits.createBurst, "shared_through_redis", rdb != nil && limiter != nil)
	// Stats: each batch of clicks summed in memory, the sums written to
	// Postgres every STATS_FLUSH.
	var stats *statsStore
	if pg != nil && cfg.stats.on && cfg.clicks.mode != "off" {
		stats = newStatsStore(pg.db, cfg, log)
		m.register(stats.collectors()...)
		mctx, cancel := context.WithTimeout(ctx, migrateTimeout)
		err := stats.maintain(mctx)
		cancel()
		if err != nil {
			return err
		}
		mctx, stopMaintenance := context.WithCancel(ctx)
		maintained := make(chan struct{})
		go func() {
			defer close(maintained)
			stats.runMaintenance(mctx, statsMaintainEvery)
		}()
		// Runs before the store closes (deferred above, so after this).
		defer func() {
			stopMaintenance()
			<-maintained
		}()
		go stats.runFlush(cfg.stats.flush)
		defer func() {
			// After the click queue's drain (deferred below, so run
			// before this): what it added is written too.
			sctx, cancel := stage()
			defer cancel()
			if err := stats.Close(sctx); err != nil {
				log.Error("stats: the last flush failed; those stats are lost (shortener_stats_lost_total)", "err", err)
			}
		}()
		log.Info("stats", "top", cfg.stats.top, "hours_kept_months", cfg.stats.keep.hours,
			"days_kept_months", cfg.stats.keep.days, "flush", cfg.stats.flush)
	} else if cfg.stats.on {
		log.Info("stats off: they need Postgres (DATABASE_URL) and clicks (CLICKS not off)")
	}
	clicks, drainClicks := openClicks(cfg.clicks, base, stats, m, log)
	defer func() {
		// run's ctx is cancelled by now; the drain takes what is left of
		// the shutdown's deadline, and counts the clicks it could not write.
		sctx, cancel := stage()
		defer cancel()
		if err := drainClicks(sctx); err != nil {
			log.Error("shutdown deadline reached: click queue not drained", "err", err)
		}
	}()

	// The certificate is read before listening, so that a missing or bad
	// file stops the start instead of failing each handshake later.
	var tlsConfig *tls.Config
	if cfg.tlsCert != "" {
		if tlsConfig, err = newTLSConfig(cfg.tlsCert, cfg.tlsKey); err != nil {
			return err
		}
	}
	// Listen before serving: a port that is taken fails here, at once, and
	// ADDR=127.0.0.1:0 lets the kernel pick a free port (the tests use that).
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.addr, err)
	}
	srv := newServer(store, clicks, stats, limiter, m, cfg, tlsConfig, log)

	if m != nil {
		msrv := newMetricsServer(m, log)
		go func() {
			if err := msrv.Serve(metricsLn); !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server", "err", err)
			}
		}()
		// Closed, not shut down gracefully: a scrape cut short is
		// retried at the next interval, and a profile being taken has
		// nothing left to profile.
		defer msrv.Close() //nolint:errcheck // Close only reports the listener's close error, and the process is stopping
		log.Info("metrics listening", "addr", metricsLn.Addr().String(), "paths", "/metrics /debug/pprof/")
	} else {
		log.Info("metrics off")
	}

	serveErr := make(chan error, 1)
	go func() {
		// tlsConfig, not srv.TLSConfig: Serve writes that field (to add
		// HTTP/2) while the log line below reads.
		if tlsConfig != nil {
			// The certificate is in TLSConfig already, hence no file
			// names. ServeTLS offers HTTP/2 and HTTP/1.1 by ALPN.
			serveErr <- srv.ServeTLS(ln, "", "")
			return
		}
		serveErr <- srv.Serve(ln)
	}()
	log.Info("listening", "addr", ln.Addr().String(), "tls", tlsConfig != nil, "access_log", cfg.accessLog)

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}

	// From here a second SIGINT or SIGTERM is no longer caught: Go's
	// default action ends the process at once, for an operator who will
	// not wait for the drain.
	stop()
	log.Info("shutting down; a second signal stops at once", "timeout", shutdownTimeout)
	// ctx is already cancelled, so the deadline for finishing in-flight
	// requests needs a fresh context.
	sctx, cancel := stage()
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// The requests still running are cut: their connections closed.
		log.Error("shutdown deadline reached: in-flight requests cut short", "err", err)
		if cerr := srv.Close(); cerr != nil {
			log.Error("close server", "err", cerr)
		}
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("stopped")
	return nil
}

// openStore picks the store: Postgres if DATABASE_URL is set, else memory,
// so that go run . works with nothing else installed.
//
// With Postgres and CREATE_BATCH above 1, creates are saved in batches
// (groupcommit.go); with LOOKUP_BATCH above 1, lookups that reach Postgres
// together share a query (lookupbatch.go).
func openStore(ctx context.Context, cfg config, m *metrics, log *slog.Logger) (Store, func() error, error) {
	if cfg.databaseURL == "" {
		log.Info("store selected", "store", "memory")
		return newMemoryStore(), func() error { return nil }, nil
	}
	pg, err := openCountedPostgres(ctx, cfg.databaseURL, cfg.pool, m.dbLookups())
	if err != nil {
		return nil, nil, err
	}
	if cfg.createBatch > 1 {
		if err := pg.startGroupCommit(ctx, cfg.createBatch, m.createBatchObserver()); err != nil {
			pg.Close() //nolint:errcheck // the start error is the one worth returning
			return nil, nil, err
		}
	}
	if cfg.lookupBatch > 1 {
		if err := pg.startLookupBatch(ctx, cfg.lookupBatch, cfg.lookupWorkers, m.lookupBatchObserver()); err != nil {
			pg.Close() //nolint:errcheck // the start error is the one worth returning
			return nil, nil, err
		}
	}
	if cfg.replicaURL != "" {
		pool := cfg.pool
		pool.readOnly = true
		// The same series as the primary's: queries, wherever they went.
		replica, err := openCountedPostgres(ctx, cfg.replicaURL, pool, m.dbLookups())
		if err != nil {
			pg.Close() //nolint:errcheck // the replica's error is the one worth returning
			return nil, nil, fmt.Errorf("replica: %w", err)
		}
		// Each read carries the fence's bound (step 47), the batches' too.
		// The primary is asked on a connection of the fence's own: one
		// waiting behind creates or a Bloom filter's build would lift
		// the bound.
		fenceDB, err := pg.openSide(pg.replyTimeout, 1, 1)
		if err != nil {
			pg.Close()      //nolint:errcheck // the fence's error is the one worth returning
			replica.Close() //nolint:errcheck // likewise
			return nil, nil, fmt.Errorf("replica: the fence's connection to the primary: %w", err)
		}
		fence := newReplicaFence(fenceDB, replica.db, cfg.replicaMaxLag, &sampledLog{log: log, every: replicaFailEvery})
		replica.fence.bound = fence.bound
		if cfg.lookupBatch > 1 {
			if err := replica.startLookupBatch(ctx, cfg.lookupBatch, cfg.lookupWorkers, m.lookupBatchObserver()); err != nil {
				pg.Close()      //nolint:errcheck // the replica's error is the one worth returning
				replica.Close() //nolint:errcheck // likewise
				fenceDB.Close() //nolint:errcheck // likewise
				return nil, nil, fmt.Errorf("replica: %w", err)
			}
		}
		m.watchReplica(replica.db)
		m.watchFence(fence)
		// The first bound before the first read; then every
		// replicaMaxLag/4 until the store is closed.
		fence.check(ctx)
		fctx, stopFence := context.WithCancel(context.WithoutCancel(ctx))
		fenceDone := make(chan struct{})
		go func() {
			defer close(fenceDone)
			fence.run(fctx)
		}()
		log.Info("reads from a replica", "max_open_conns", pool.maxOpen, "client_check", pool.clientCheck, "lookup_batch", cfg.lookupBatch, "lookup_workers", cfg.lookupWorkers, "max_lag", fence.maxLag)
		return &replicaReads{Store: pg, replica: replica, counts: m.replicaResults(), timeout: cfg.pool.timeout,
				failLog: &sampledLog{log: log, every: replicaFailEvery}, fence: fence},
			func() error {
				stopFence()
				<-fenceDone
				return errors.Join(pg.Close(), replica.Close(), fenceDB.Close())
			}, nil
	}
	log.Info("store selected", "store", "postgres",
		"max_open_conns", cfg.pool.maxOpen, "max_idle_conns", cfg.pool.maxIdle,
		"conn_max_idle_time", cfg.pool.maxIdleTime, "conn_max_lifetime", cfg.pool.maxLifetime,
		"prepare", cfg.pool.prepare, "client_check", cfg.pool.clientCheck, "create_batch", cfg.createBatch, "lookup_batch", cfg.lookupBatch, "lookup_workers", cfg.lookupWorkers)
	return pg, pg.Close, nil
}

// newLogger is the program's one logger: text lines by default, one JSON
// object per line with LOG_FORMAT=json (for a log collector), and the
// request id on every line logged for a request.
func newLogger(format string, w io.Writer) *slog.Logger {
	var h slog.Handler = slog.NewTextHandler(w, nil)
	if format == "json" {
		h = slog.NewJSONHandler(w, nil)
	}
	return slog.New(logHandler{h})
}
