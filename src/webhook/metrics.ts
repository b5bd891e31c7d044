/** The webhook's metrics, on a caller's Registry (never the global): clean per test, one /metrics with the migrator's. */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client'
import { ADMISSION_OPERATIONS, DENIAL_REASONS, type AdmissionOperation, type DenialReason } from './admission.js'
import { CAP_REASONS, type CapReason } from './connection-policy.js'
import { CERTIFICATE_REJECTIONS, type CertificateRejection } from './tls.js'

export const METRIC_NAMES = Object.freeze({
  reviews: 'crd_migrator_admission_reviews_total',
  denials: 'crd_migrator_admission_denials_total',
  duration: 'crd_migrator_admission_review_duration_seconds',
  badRequests: 'crd_migrator_admission_bad_requests_total',
  certificateExpiry: 'crd_migrator_webhook_certificate_expiry_timestamp_seconds',
  certificateRejected: 'crd_migrator_webhook_certificate_reload_rejected_total',
  connectionsRefused: 'crd_migrator_webhook_connections_refused_total',
  connectionsEvicted: 'crd_migrator_webhook_connections_evicted_total',
  connectionsOpen: 'crd_migrator_webhook_connections',
})

/** A decision takes microseconds; the top buckets catch GC pauses and event-loop stalls. */
export const REVIEW_DURATION_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1]

export type Decision = 'allowed' | 'denied'

export type WebhookMetrics = ReturnType<typeof createWebhookMetrics>

export function createWebhookMetrics(registry: Registry) {
  const m = registerMetrics(registry)
  zeroSeries(m)
  const { reviews, denials, duration, badRequests, certificateExpiry, certificateRejected } = m
  const { connectionsRefused, connectionsEvicted, connectionsOpen } = m
  return {
    observeReview(operation: AdmissionOperation, decision: Decision, seconds: number, denial?: DenialReason): void {
      reviews.inc({ operation, decision })
      if (decision === 'denied' && denial) denials.inc({ reason: denial })
      duration.observe(seconds)
    },
    countBadRequest(status: number): void {
      badRequests.inc({ code: String(status) })
    },
    setCertificate(certificate: { notAfter: Date; serialNumber: string } | undefined): void {
      // One series at a time: the serial label changes on rotation and the old one must go.
      certificateExpiry.reset()
      if (certificate) {
        certificateExpiry.set({ serial: certificate.serialNumber }, Math.floor(certificate.notAfter.getTime() / 1000))
      }
    },
    countCertificateRejected(reason: CertificateRejection): void {
      certificateRejected.inc({ reason })
    },
    countConnectionRefused(reason: CapReason): void {
      connectionsRefused.inc({ reason })
    },
    countConnectionEvicted(reason: CapReason | 'no-review'): void {
      connectionsEvicted.inc({ reason })
    },
    setConnectionsOpen(apiServer: number, other: number): void {
      connectionsOpen.set({ peer: 'apiserver' }, apiServer)
      connectionsOpen.set({ peer: 'other' }, other)
    },
  }
}

type Metrics = ReturnType<typeof registerMetrics>

/** The webhook's metrics on `registry`, in the order /metrics lists them. */
function registerMetrics(registry: Registry) {
  const reason = ['reason'] as const
  return {
    reviews: counter(registry, METRIC_NAMES.reviews, 'AdmissionReviews answered, by operation and decision.', [
      'operation',
      'decision',
    ] as const),
    denials: counter(registry, METRIC_NAMES.denials, 'AdmissionReviews denied, by reason.', reason),
    duration: reuseOr(
      registry,
      METRIC_NAMES.duration,
      () =>
        new Histogram({
          name: METRIC_NAMES.duration,
          help: 'Time from a parsed AdmissionReview to its answer.',
          buckets: REVIEW_DURATION_BUCKETS,
          registers: [registry],
        }),
    ),
    badRequests: counter(
      registry,
      METRIC_NAMES.badRequests,
      'Requests to /validate-crd that were not a well-formed AdmissionReview, by HTTP status answered.',
      ['code'] as const,
    ),
    certificateExpiry: gauge(
      registry,
      METRIC_NAMES.certificateExpiry,
      'notAfter of the serving certificate in use, as a Unix timestamp; absent while none is loaded.',
      ['serial'] as const,
    ),
    certificateRejected: counter(
      registry,
      METRIC_NAMES.certificateRejected,
      'Serving certificate/key pairs refused at start-up or on reload (the previous pair keeps serving), once per pair, by reason.',
      reason,
    ),
    connectionsRefused: counter(
      registry,
      METRIC_NAMES.connectionsRefused,
      'Connections to the webhook closed as soon as they were accepted, at a cap (reason: peer = webhook.maxConnectionsPerPeer, shared = maxConnections - reservedConnections, total = maxConnections) with no idle connection to close instead.',
      reason,
    ),
    connectionsEvicted: counter(
      registry,
      METRIC_NAMES.connectionsEvicted,
      'Open connections to the webhook closed by its connection policy: idle ones, to make room for a new one at a cap (reason peer, shared, total), or no-review (no valid AdmissionReview within webhook.timeouts.firstReviewSeconds).',
      reason,
    ),
    connectionsOpen: gauge(
      registry,
      METRIC_NAMES.connectionsOpen,
      'Connections to the webhook open now, by peer: apiserver (webhook.apiServerAddresses) or other.',
      ['peer'] as const,
    ),
  }
}

/** Zero-initialised series, so rate() and alerts work before the first denial. */
function zeroSeries(m: Metrics): void {
  for (const operation of ADMISSION_OPERATIONS) {
    for (const decision of ['allowed', 'denied'] as const) m.reviews.inc({ operation, decision }, 0)
  }
  for (const reason of DENIAL_REASONS) m.denials.inc({ reason }, 0)
  for (const reason of CERTIFICATE_REJECTIONS) m.certificateRejected.inc({ reason }, 0)
  for (const reason of CAP_REASONS) {
    m.connectionsRefused.inc({ reason }, 0)
    m.connectionsEvicted.inc({ reason }, 0)
  }
  m.connectionsEvicted.inc({ reason: 'no-review' }, 0)
  m.connectionsOpen.set({ peer: 'apiserver' }, 0)
  m.connectionsOpen.set({ peer: 'other' }, 0)
}

function counter<L extends string>(registry: Registry, name: string, help: string, labelNames: readonly L[]): Counter<L> {
  return reuseOr(registry, name, () => new Counter({ name, help, labelNames, registers: [registry] }))
}

function gauge<L extends string>(registry: Registry, name: string, help: string, labelNames: readonly L[]): Gauge<L> {
  return reuseOr(registry, name, () => new Gauge({ name, help, labelNames, registers: [registry] }))
}

/** Creating a webhook twice on one registry (tests, restarts in-process) reuses the metrics. */
function reuseOr<T>(registry: Registry, name: string, create: () => T): T {
  return (registry.getSingleMetric(name) as T | undefined) ?? create()
}
