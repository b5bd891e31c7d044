import { z } from 'zod'
import { DEFAULT_BREAK_GLASS_GROUPS, DEFAULT_MIGRATING_ANNOTATION, DEFAULT_MIGRATOR_USERS, StateAnnotation } from './annotations.js'

export const PhaseName = z.enum(['StorageVersionMigration', 'CleanupManagedFields'])

// A Kubernetes qualified annotation key: optional DNS prefix, then a name.
const annotationKey = z.string().regex(
  /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/,
  'must be a Kubernetes annotation key such as example.com/migrating',
)

export const CrdOptionsSchema = z.strictObject({
  /** Write through the status subresource (for CRs whose own webhooks reject no-op writes). */
  useStatusSubresource: z.boolean().default(false),
  skipPhases: z.array(PhaseName).default([]),
  concurrency: z.number().int().min(1).max(1024).optional(),
  qps: z.number().min(0).optional(),
})

export const ConfigSchema = z.strictObject({
  /** Path to a kubeconfig; in-cluster config or $KUBECONFIG when unset. */
  kubeconfig: z.string().min(1).optional(),
  logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  annotations: z.strictObject({
    migrating: annotationKey.default(DEFAULT_MIGRATING_ANNOTATION),
  }).prefault({}),
  identities: z.strictObject({
    migratorUsers: z.array(z.string().min(1)).default(DEFAULT_MIGRATOR_USERS),
    migratorGroups: z.array(z.string().min(1)).default([]),
    breakGlassGroups: z.array(z.string().min(1)).default(DEFAULT_BREAK_GLASS_GROUPS),
  }).prefault({}),
  webhook: z.strictObject({
    enabled: z.boolean().default(true),
    host: z.string().default('0.0.0.0'),
    port: z.number().int().min(0).max(65535).default(9443),
    certFile: z.string().default('/tls/tls.crt'),
    keyFile: z.string().default('/tls/tls.key'),
    /** object and oldObject of a 1.5 MB CRD plus the envelope (webhook/server.ts DEFAULT_BODY_LIMIT_BYTES). */
    bodyLimitBytes: z.number().int().min(1024).default(3 * 1024 * 1024),
  }).prefault({}),
  metrics: z.strictObject({
    /** Plain-HTTP listener for /metrics, /healthz and /readyz; port 0 turns it off. */
    host: z.string().default('0.0.0.0'),
    port: z.number().int().min(0).max(65535).default(8080),
  }).prefault({}),
  migrator: z.strictObject({
    enabled: z.boolean().default(true),
    selector: z.strictObject({
      /** CRDs whose labels match are managed; empty selects none by label. */
      labelSelector: z.string().default(`${StateAnnotation.managed}=true`),
      /** CRDs managed by name, whatever their labels. */
      names: z.array(z.string().min(1)).default([]),
    }).prefault({}),
    concurrency: z.number().int().min(1).max(1024).default(16),
    /** Writes started per second across a migration; 0 for no client-side limit. */
    qps: z.number().min(0).default(500),
    pageSize: z.number().int().min(1).max(10000).default(500),
    maxAttempts: z.number().int().min(1).max(100).default(8),
    progressIntervalSeconds: z.number().min(0.1).default(5),
    /** A freeze whose owner has not written a heartbeat for this long is taken over. */
    takeoverAfterSeconds: z.number().min(1).default(30),
    skipPhases: z.array(PhaseName).default([]),
    /** Also move managedFields of served non-storage versions to the storage version. */
    rewriteServedManagedFields: z.boolean().default(false),
    /**
     * File holding the key that seals checkpoints (at least 16 bytes); a resumed run trusts
     * only checkpoints sealed with it. Unset: a file in $XDG_STATE_HOME/crd-migrator.
     */
    stateKeyFile: z.string().min(1).optional(),
    /** How often every selected CRD is looked at again, besides watch events. */
    resyncSeconds: z.number().min(1).default(600),
    /** Per-CRD options, by CRD name. */
    crds: z.record(z.string().min(1), CrdOptionsSchema).default({}),
  }).prefault({}),
  leaderElection: z.strictObject({
    enabled: z.boolean().default(true),
    /** Namespace of the Lease; $POD_NAMESPACE, then `default`, when unset. */
    namespace: z.string().min(1).optional(),
    leaseName: z.string().min(1).default('crd-migrator'),
    leaseDurationSeconds: z.number().int().min(2).default(15),
    renewDeadlineSeconds: z.number().int().min(1).default(10),
    retryPeriodSeconds: z.number().min(0.1).default(2),
  }).prefault({}).refine(l => l.renewDeadlineSeconds < l.leaseDurationSeconds, {
    message: 'renewDeadlineSeconds must be less than leaseDurationSeconds', path: ['renewDeadlineSeconds'],
  }),
})

export type Config = z.infer<typeof ConfigSchema>
export type CrdOptions = z.infer<typeof CrdOptionsSchema>
export type ConfigInput = z.input<typeof ConfigSchema>
