/**
 * The configuration and every default of crd-migrator, declared here and nowhere else:
 * code that needs a default without a parsed Config reads CONFIG_DEFAULTS, never a literal.
 * What a setting means to users is settings.ts's (SETTINGS); comments here add what it does not.
 */
import { z } from 'zod'
import { invalidAcceptEntry } from './accept-entries.js'
import { isAddressOrCidr } from './addresses.js'

/** The migration phases, in the order they run; migrator/plan.ts names them for the code. */
export const PHASE_NAMES = ['StorageVersionMigration', 'StashedObjectMigration', 'CleanupManagedFields'] as const
/** `<crd name>:<field path>` entries, each checked (config/accept-entries.ts). */
const acceptEntries = z
  .array(
    z.string().superRefine((entry, ctx) => {
      const why = invalidAcceptEntry(entry)
      if (why) ctx.addIssue({ code: 'custom', message: why })
    }),
  )
  .default([])

const PhaseName = z.enum(PHASE_NAMES)

/**
 * A Kubernetes qualified annotation key. The one copy of this pattern (config, and the
 * key pasted into CEL by the webhook configuration renderer); the chart's _helpers.tpl
 * holds it as a Go RE2 regex, kept equal by test/unit/annotation-key.test.ts, hence a
 * string with no JavaScript-only syntax.
 */
export const ANNOTATION_KEY_PATTERN =
  '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'
export const ANNOTATION_KEY = new RegExp(ANNOTATION_KEY_PATTERN)

const annotationKey = z.string().regex(ANNOTATION_KEY, 'must be a Kubernetes annotation key such as example.com/migrating')

/** How log lines are written: JSON lines (pino's), or text for people (src/log-text.ts). */
const LOG_FORMATS = ['json', 'text'] as const
export type LogFormat = (typeof LOG_FORMATS)[number]

/** Presets of stash rules (migrator/stashes/rules.ts fills them in). */
export const STASH_PRESETS = ['kubevirt-instancetypes'] as const

const GroupVersionResource = z.strictObject({
  group: z.string(),
  version: z.string().min(1),
  resource: z.string().min(1),
})

const jsonPointer = z.string().regex(/^(\/[^/]*)+$/, 'must be a JSON pointer such as /spec/instancetype/revisionName')

/**
 * Where copies of custom resources are stashed inside other objects (KubeVirt keeps each
 * VirtualMachine's instancetype in a ControllerRevision), and who points at a stash by
 * name. A preset fills in everything; explicit fields override it.
 */
export const StashRuleSchema = z
  .strictObject({
    preset: z.enum(STASH_PRESETS).optional(),
    /** Embedded objects of this API group count (the group of the managed CRDs). */
    group: z.string().min(1).optional(),
    /** Objects holding the stashes, and where in them the embedded object is. */
    source: z
      .strictObject({
        ...GroupVersionResource.shape,
        labelSelector: z.string().optional(),
        /** Only these namespaces; empty: all. */
        namespaces: z.array(z.string().min(1)).default([]),
        /** JSON pointer of the embedded object. */
        dataPointer: jsonPointer.default('/data'),
      })
      .optional(),
    /** A label on the stash naming its embedded object's version; set anew on the new stash. */
    versionLabel: z.string().optional(),
    /** Objects (in the stash's namespace) that point at a stash by name, and where. */
    referrers: z.array(z.strictObject({ ...GroupVersionResource.shape, pointers: z.array(jsonPointer).min(1) })).optional(),
  })
  .refine((r) => r.preset !== undefined || (r.group !== undefined && r.source !== undefined && (r.referrers?.length ?? 0) > 0), {
    message: 'a stash rule needs a preset, or group, source and referrers',
  })

const CrdOptionsSchema = z.strictObject({
  /** Write through the status subresource (for CRs whose own webhooks reject no-op writes). */
  useStatusSubresource: z.boolean().default(false),
  skipPhases: z.array(PhaseName).default([]),
  concurrency: z.number().int().min(1).max(1024).optional(),
  qps: z.number().min(0).optional(),
  /** Who rewrites the objects of this CRD (phase StorageVersionMigration); default migrator.engine. */
  engine: z.enum(['own', 'builtin']).optional(),
})

/**
 * A section of the configuration: only its own keys, its defaults filled in when it is left out.
 * Every key of a section has a default or is optional, so {} is its input (CONFIG_DEFAULTS parses it).
 */
function section<Shape extends z.ZodRawShape>(shape: Shape) {
  return z.strictObject(shape).prefault({} as z.input<z.ZodObject<Shape, z.core.$strict>>)
}

export const ConfigSchema = z.strictObject({
  kubeconfig: z.string().min(1).optional(),
  context: z.string().min(1).optional(),
  connectAttempts: z.number().int().min(1).max(20).default(3),
  logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  logFormat: z.enum(LOG_FORMATS).optional(),
  progressEvery: z.number().min(0).max(3600).default(5),
  annotations: section({
    /** Freezes a CRD's storage version (value "true"): KEP-2855's key, configurable to keep apart from another KEP-2855 migrator. */
    migrating: annotationKey.default('ksvm.sigs.k8s.io/migrating'),
  }),
  identities: section({
    /** The migrator's identity: the ServiceAccount the Helm chart deploys. */
    migratorUsers: z.array(z.string().min(1)).default(['system:serviceaccount:crd-migrator:crd-migrator']),
    migratorGroups: z.array(z.string().min(1)).default([]),
    breakGlassGroups: z.array(z.string().min(1)).default(['system:masters']),
    /**
     * Kubernetes' own storage version migrator (kube-controller-manager, as its own user or,
     * with --use-service-account-credentials, its ServiceAccount: config/identities.ts): the
     * only others who may change a CRD's StorageMigrating condition. Their requests that
     * change only it skip the webhook, so a webhook outage does not stall built-in migrations.
     */
    builtinMigratorUsers: z
      .array(z.string().min(1))
      .default(['system:kube-controller-manager', 'system:serviceaccount:kube-system:storage-version-migrator-controller']),
  }),
  webhook: section({
    enabled: z.boolean().default(true),
    host: z.string().default('0.0.0.0'),
    /** HTTPS port of the webhook; 0 picks a free one (tests). */
    port: z.number().int().min(0).max(65535).default(9443),
    certFile: z.string().default('/tls/tls.crt'),
    keyFile: z.string().default('/tls/tls.key'),
    /**
     * object AND oldObject, each at most ~1.5 MB (etcd's request limit), plus the envelope
     * fit in 3 MiB, the API server's own body limit. More would only cost event-loop CPU.
     */
    bodyLimitBytes: z
      .number()
      .int()
      .min(1024)
      .default(3 * 1024 * 1024),
    /**
     * Connections open at most (which one goes: webhook/connection-policy.ts). Uncapped, anyone reaching
     * the port could push the pod past 512 Mi (figures: docs/webhook.md#the-webhook); client-go keeps
     * at most 25 idle connections per webhook host.
     */
    maxConnections: z.number().int().min(1).default(1000),
    /** Connections one peer (remote address) other than the API server keeps open at most; why: webhook/connection-policy.ts. */
    maxConnectionsPerPeer: z.number().int().min(1).default(100),
    /** IPs or CIDRs the API server's calls come from (what they are spared: connection-policy.ts); empty: nothing reserved. */
    apiServerAddresses: z.array(z.string().refine(isAddressOrCidr, { message: 'must be an IP address or a CIDR' })).default([]),
    /** Slots of maxConnections only apiServerAddresses may take (when they are set). */
    reservedConnections: z.number().int().min(0).default(100),
    /**
     * Timeouts of the HTTPS listener (file-only; the API server calls with timeoutSeconds 5, at most 30):
     * - tlsHandshakeSeconds: Node's default is 120 s and no HTTP timeout runs before the
     *   handshake, so a client that never says hello would hold each connection for minutes.
     * - requestSeconds: headers and body must arrive within it (slow-loris bound, checked
     *   every connectionsCheckingIntervalSeconds); headersSeconds stays below it.
     * - connectionSeconds: socket inactivity while a request is being served.
     * - keepAliveSeconds: just past client-go's 90 s idle timeout, so the API server closes idle
     *   connections, not us (why: docs/webhook.md#the-webhook; a lost review is a denied CRD update
     *   under failurePolicy: Fail). Memory is bounded by maxConnections, not by this.
     */
    timeouts: section({
      tlsHandshakeSeconds: z.number().min(0.1).default(5),
      headersSeconds: z.number().min(0.1).default(5),
      requestSeconds: z.number().min(0.1).default(10),
      connectionSeconds: z.number().min(0.1).default(15),
      keepAliveSeconds: z.number().min(0.1).default(95),
      connectionsCheckingIntervalSeconds: z.number().min(0.1).default(2),
      /**
       * A connection with no valid AdmissionReview this long after it opened is closed (the
       * API server sends its review at once), so holding a slot costs a handshake each time.
       */
      firstReviewSeconds: z.number().min(0.1).default(5),
    }).refine((t) => t.headersSeconds <= t.requestSeconds, {
      message: 'headersSeconds must not be more than requestSeconds',
      path: ['headersSeconds'],
    }),
  })
    .refine((w) => w.maxConnectionsPerPeer <= w.maxConnections, {
      message: 'maxConnectionsPerPeer must not be more than maxConnections',
      path: ['maxConnectionsPerPeer'],
    })
    .refine((w) => w.reservedConnections < w.maxConnections, {
      message: 'reservedConnections must be less than maxConnections',
      path: ['reservedConnections'],
    }),
  metrics: section({
    /**
     * The plain-HTTP ops listener, the only one serving /metrics, /healthz and /readyz
     * (health/plugin.ts). Port 0 turns it off, probes included: for tests, never a pod (the chart refuses it).
     */
    host: z.string().default('0.0.0.0'),
    port: z.number().int().min(0).max(65535).default(8080),
  }),
  migrator: section({
    enabled: z.boolean().default(true),
    selector: section({
      /** CRDs whose labels match are managed; empty selects none by label. */
      labelSelector: z.string().default('crd-migrator.io/managed=true'),
      names: z.array(z.string().min(1)).default([]),
    }),
    /** Writes in flight at most: the cap of the adaptive limit (migrator/adaptive-concurrency.ts). */
    concurrency: z.number().int().min(1).max(1024).default(64),
    /** Writes started per second across a migration; 0 (default): no fixed limit, the adaptive limit and the chart's APF level rule. */
    qps: z.number().min(0).default(0),
    /** CRDs migrated at once, under one write budget: `concurrency` and `qps` hold for the whole process (migrator/engine/budget.ts). */
    maxParallelCrds: z.number().int().min(1).max(256).default(4),
    pageSize: z.number().int().min(1).max(10000).default(500),
    maxAttempts: z.number().int().min(1).max(100).default(8),
    progressIntervalSeconds: z.number().min(0.1).default(5),
    /** A freeze whose owner has not written a heartbeat for this long is taken over. */
    takeoverAfterSeconds: z.number().min(1).default(30),
    skipPhases: z.array(PhaseName).default([]),
    /** A run that finds the CRD's conversion webhook down longer than this fails (freeze lifted); cert-manager rotations measured 60-90 s. */
    conversionOutageLimitSeconds: z.number().min(1).default(300),
    /**
     * API server URLs (e.g. https://10.0.0.1:6443) asked one by one whether they store the new
     * version, where default/kubernetes EndpointSlices list no reachable address. Empty: those EndpointSlices.
     */
    apiServerEndpoints: z.array(z.url({ protocol: /^https?$/ })).default([]),
    storageSwitchTimeoutSeconds: z.number().min(1).default(120),
    engine: z.enum(['own', 'builtin']).default('own'),
    builtinStartTimeoutSeconds: z.number().min(1).default(120),
    conversionWaitSeconds: z.number().min(0).default(180),
    /**
     * Phase StashedObjectMigration (opt-in): copies of managed objects stashed in other objects
     * are recreated in the storage version, referrers repointed. Presets by name.
     */
    stashPresets: z.array(z.enum(STASH_PRESETS)).default([]),
    /** The same with rules spelt out (config file only). */
    stashes: z.array(StashRuleSchema).default([]),
    /**
     * Prove each rewrite keeps the content first (a narrowed schema or an unfaithful conversion
     * webhook would make a loss permanent); a difference is CRDM_DATA_LOSS. Off only knowingly.
     */
    losslessCheck: z.boolean().default(true),
    /**
     * Removals accepted on purpose, as `<crd name>:<field path>` (e.g.
     * `widgets.example.com:spec.items[*].name`). Only the migrator's own configuration can say so.
     */
    acceptRemovals: acceptEntries,
    /** Changes accepted on purpose, as `<crd name>:<field path>`: any change at or below the path (e.g. `pipelineruns.tekton.dev:spec.timeout`). */
    acceptChanges: acceptEntries,
    /** CRDs whose uncheckable objects (unserved stored version, no managedFields) are rewritten and counted, not refused. */
    acceptUnchecked: z.array(z.string().min(1)).default([]),
    /**
     * Also take consent from the CRD's `crd-migrator.io/accept-*` annotations. Only where the
     * chart's ValidatingAdmissionPolicy keeps them to holders of the `accept-changes` permission.
     */
    consentAnnotations: z.boolean().default(false),
    /** Also move managedFields of served non-storage versions to the storage version. */
    rewriteServedManagedFields: z.boolean().default(false),
    /** Key sealing checkpoints (at least 16 bytes; a resumed run trusts only those). Unset: in $XDG_STATE_HOME/crd-migrator. */
    stateKeyFile: z.string().min(1).optional(),
    /**
     * Refuse a state key file others could read or replace (readable by others or another group,
     * owned by neither us nor root, or in a non-sticky directory others may write); off: a warning.
     */
    strictStateKeyFile: z.boolean().default(false),
    /** Reconcile KSVM's StorageVersionMigration objects (migration.k8s.io/v1alpha1), custom or built-in resources; needs that CRD. */
    storageVersionMigrations: z.boolean().default(false),
    /**
     * A StorageVersionMigration naming an unmanaged CRD: `rewrite` without freezing (storedVersions
     * narrowed only if the generation held, as KSVM does), or `refuse` (Failed, NotManaged).
     */
    storageVersionMigrationsUnmanaged: z.enum(['rewrite', 'refuse']).default('rewrite'),
    /**
     * KSVM's trigger (serve, leader only): a StorageState per resource from discovery's
     * storageVersionHash, a StorageVersionMigration when it changes. Needs both KSVM CRDs.
     */
    ksvmTrigger: section({
      enabled: z.boolean().default(false),
      /** How often discovery is read (KSVM: 10 minutes); a CRD's storage flip is seen at once through the CRD watch. */
      pollSeconds: z.number().min(1).default(600),
    }),
    /** How often every selected CRD is looked at again, besides watch events. */
    resyncSeconds: z.number().min(1).default(600),
    crds: z.record(z.string().min(1), CrdOptionsSchema).default({}),
  }),
  leaderElection: section({
    enabled: z.boolean().default(true),
    /** Namespace of the Lease; $POD_NAMESPACE, then `default`, when unset. */
    namespace: z.string().min(1).optional(),
    leaseName: z.string().min(1).default('crd-migrator'),
    leaseDurationSeconds: z.number().int().min(2).default(15),
    renewDeadlineSeconds: z.number().int().min(1).default(10),
    retryPeriodSeconds: z.number().min(0.1).default(2),
  }).refine((l) => l.renewDeadlineSeconds < l.leaseDurationSeconds, {
    message: 'renewDeadlineSeconds must be less than leaseDurationSeconds',
    path: ['renewDeadlineSeconds'],
  }),
})

export type Config = z.infer<typeof ConfigSchema>

type DeepReadonly<T> = T extends (infer E)[]
  ? readonly DeepReadonly<E>[]
  : T extends object
    ? { readonly [K in keyof T]: DeepReadonly<T[K]> }
    : T

function deepFreeze<T>(value: T): DeepReadonly<T> {
  if (value !== null && typeof value === 'object') {
    for (const v of Object.values(value)) deepFreeze(v)
    Object.freeze(value)
  }
  return value as DeepReadonly<T>
}

/**
 * The defaults, as parsed from nothing: what a function uses when its caller gives no
 * value. Frozen, all the way down (each parse gets its own copies, so this freezes no
 * other Config).
 */
export const CONFIG_DEFAULTS: DeepReadonly<Config> = deepFreeze(ConfigSchema.parse({}))
