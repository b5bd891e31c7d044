import { Counter, Gauge, Histogram, type Registry } from 'prom-client'

export type MigratorMetrics = ReturnType<typeof createMigratorMetrics>

/** The migrator's metrics on `registry`, in the order /metrics lists them. */
export function createMigratorMetrics(registry: Registry) {
  const registers = [registry]
  const counter = <L extends string = string>(name: string, help: string, labelNames: readonly L[] = []) =>
    new Counter({ name, help, labelNames, registers })
  const gauge = <L extends string = string>(name: string, help: string, labelNames: readonly L[] = []) =>
    new Gauge({ name, help, labelNames, registers })
  const histogram = <L extends string>(name: string, help: string, labelNames: readonly L[], buckets: number[]) =>
    new Histogram({ name, help, labelNames, registers, buckets })
  return {
    objects: counter(
      'crd_migrator_objects_total',
      'Custom resources handled, by CRD, phase and outcome (rewritten, current, skipped, gone, conflict, failed).',
      ['crd', 'phase', 'outcome'],
    ),
    remaining: gauge(
      'crd_migrator_objects_remaining',
      'Custom resources still to handle in the running phase (best estimate from the list).',
      ['crd', 'phase'],
    ),
    writesInFlight: gauge('crd_migrator_writes_in_flight', 'Writes to custom resources currently in flight.'),
    concurrencyLimit: gauge(
      'crd_migrator_concurrency_limit',
      'Writes allowed in flight now by the running phase: its adaptive limit, at most the configured concurrency.',
      ['crd', 'phase'],
    ),
    writeDuration: histogram(
      'crd_migrator_write_duration_seconds',
      'Latency of one custom-resource write, retries included.',
      ['phase'],
      [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10],
    ),
    throttled: counter('crd_migrator_throttled_total', 'Answers of 429 Too Many Requests from the API server.'),
    phaseDuration: histogram(
      'crd_migrator_phase_duration_seconds',
      'Duration of migration phases.',
      ['crd', 'phase', 'result'],
      [0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600],
    ),
    migrations: counter(
      'crd_migrator_migrations_total',
      'Finished migrations by result (Succeeded, Failed, Skipped, Blocked: not started, conversion webhook down).',
      ['result'],
    ),
    crdsInFlight: gauge(
      'crd_migrator_crds_in_flight',
      'CRD migrations running now (at most migrator.maxParallelCrds, all under one write budget).',
    ),
    crdsQueued: gauge('crd_migrator_crds_queued', "CRDs waiting for the controller's turn (queued, not yet started)."),
    frozen: gauge(
      'crd_migrator_frozen_crds',
      'CRDs frozen (migrating annotation set) by something other than crd-migrator (owner=foreign); never lifted by us: see the README.',
      ['crd', 'owner'],
    ),
    apiServers: gauge(
      'crd_migrator_apiservers',
      'API servers at the last storage-switch check: listed (EndpointSlices or --apiserver-endpoints) and checked one by one (0: only the one we talk to).',
      ['state'],
    ),
    conversionOutages: counter(
      'crd_migrator_conversion_outages_total',
      "Outages of a CRD's conversion webhook met during migrations (every request paused until it answered).",
      ['crd'],
    ),
    conversionOutageSeconds: counter(
      'crd_migrator_conversion_outage_seconds_total',
      "Time migrations spent paused for a CRD's conversion webhook.",
      ['crd'],
    ),
  }
}
