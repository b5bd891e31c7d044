import { Counter, Gauge, Histogram, type Registry } from 'prom-client'

export class MigratorMetrics {
  readonly objects: Counter<'crd' | 'phase' | 'outcome'>
  readonly remaining: Gauge<'crd' | 'phase'>
  readonly writesInFlight: Gauge
  readonly concurrencyLimit: Gauge<'crd' | 'phase'>
  readonly writeDuration: Histogram<'phase'>
  readonly throttled: Counter
  readonly phaseDuration: Histogram<'crd' | 'phase' | 'result'>
  readonly migrations: Counter<'result'>
  readonly crdsInFlight: Gauge
  readonly crdsQueued: Gauge
  readonly frozen: Gauge<'crd' | 'owner'>
  readonly apiServers: Gauge<'state'>
  readonly conversionOutages: Counter<'crd'>
  readonly conversionOutageSeconds: Counter<'crd'>

  constructor(registry: Registry) {
    const registers = [registry]
    this.objects = new Counter({
      name: 'crd_migrator_objects_total',
      help: 'Custom resources handled, by CRD, phase and outcome (rewritten, current, skipped, gone, conflict, failed).',
      labelNames: ['crd', 'phase', 'outcome'],
      registers,
    })
    this.remaining = new Gauge({
      name: 'crd_migrator_objects_remaining',
      help: 'Custom resources still to handle in the running phase (best estimate from the list).',
      labelNames: ['crd', 'phase'],
      registers,
    })
    this.writesInFlight = new Gauge({
      name: 'crd_migrator_writes_in_flight',
      help: 'Writes to custom resources currently in flight.',
      registers,
    })
    this.concurrencyLimit = new Gauge({
      name: 'crd_migrator_concurrency_limit',
      help: 'Writes allowed in flight now by the running phase: its adaptive limit, at most the configured concurrency.',
      labelNames: ['crd', 'phase'],
      registers,
    })
    this.writeDuration = new Histogram({
      name: 'crd_migrator_write_duration_seconds',
      help: 'Latency of one custom-resource write, retries included.',
      labelNames: ['phase'],
      registers,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10],
    })
    this.throttled = new Counter({
      name: 'crd_migrator_throttled_total',
      help: 'Answers of 429 Too Many Requests from the API server.',
      registers,
    })
    this.phaseDuration = new Histogram({
      name: 'crd_migrator_phase_duration_seconds',
      help: 'Duration of migration phases.',
      labelNames: ['crd', 'phase', 'result'],
      registers,
      buckets: [0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600],
    })
    this.migrations = new Counter({
      name: 'crd_migrator_migrations_total',
      help: 'Finished migrations by result (Succeeded, Failed, Skipped, Blocked: not started, conversion webhook down).',
      labelNames: ['result'],
      registers,
    })
    this.crdsInFlight = new Gauge({
      name: 'crd_migrator_crds_in_flight',
      help: 'CRD migrations running now (at most migrator.maxParallelCrds, all under one write budget).',
      registers,
    })
    this.crdsQueued = new Gauge({
      name: 'crd_migrator_crds_queued',
      help: "CRDs waiting for the controller's turn (queued, not yet started).",
      registers,
    })
    this.frozen = new Gauge({
      name: 'crd_migrator_frozen_crds',
      help: 'CRDs frozen (migrating annotation set) by something other than crd-migrator (owner=foreign); never lifted by us: see the README.',
      labelNames: ['crd', 'owner'],
      registers,
    })
    this.apiServers = new Gauge({
      name: 'crd_migrator_apiservers',
      help: 'API servers at the last storage-switch check: listed (EndpointSlices or --apiserver-endpoints) and checked one by one (0: only the one we talk to).',
      labelNames: ['state'],
      registers,
    })
    this.conversionOutages = new Counter({
      name: 'crd_migrator_conversion_outages_total',
      help: "Outages of a CRD's conversion webhook met during migrations (every request paused until it answered).",
      labelNames: ['crd'],
      registers,
    })
    this.conversionOutageSeconds = new Counter({
      name: 'crd_migrator_conversion_outage_seconds_total',
      help: "Time migrations spent paused for a CRD's conversion webhook.",
      labelNames: ['crd'],
      registers,
    })
  }
}
