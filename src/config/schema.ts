/**
 * The configuration, and every default of it: a value that has a default anywhere in
 * crd-migrator (the webhook's body limit, timeouts, host and port, the admission policy's
 * annotation key and identities, the controller's selector) declares it here and nowhere
 * else. Code that needs a default without a parsed Config reads CONFIG_DEFAULTS (below)
 * or a constant derived from it, never a literal of its own.
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
 * A Kubernetes qualified annotation key: an optional DNS-subdomain prefix and `/`, then a
 * name of 1-63 characters. The one copy of this pattern: the config checks
 * annotations.migrating with it, the webhook configuration renderer checks the key it
 * pastes into a CEL string literal with it, and the chart
 * (charts/crd-migrator/templates/_helpers.tpl) holds the same text as a Helm (Go RE2)
 * regex, which test/unit/annotation-key.test.ts keeps equal to this one. Written as a
 * string with no JavaScript-only syntax for that reason.
 */
export const ANNOTATION_KEY_PATTERN =
  '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'
export const ANNOTATION_KEY = new RegExp(ANNOTATION_KEY_PATTERN)

const annotationKey = z.string().regex(ANNOTATION_KEY, 'must be a Kubernetes annotation key such as example.com/migrating')

/** How log lines are written: JSON lines (pino's), or text for people (src/log-text.ts). */
export const LOG_FORMATS = ['json', 'text'] as const
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

export const CrdOptionsSchema = z.strictObject({
  /** Write through the status subresource (for CRs whose own webhooks reject no-op writes). */
  useStatusSubresource: z.boolean().default(false),
  skipPhases: z.array(PhaseName).default([]),
  concurrency: z.number().int().min(1).max(1024).optional(),
  qps: z.number().min(0).optional(),
  /** Who rewrites the objects of this CRD (phase StorageVersionMigration); default migrator.engine. */
  engine: z.enum(['own', 'builtin']).optional(),
})

export const ConfigSchema = z.strictObject({
  /** Path to a kubeconfig; in-cluster config or $KUBECONFIG when unset. */
  kubeconfig: z.string().min(1).optional(),
  /** Kubeconfig context to use; the kubeconfig's current-context when unset. */
  context: z.string().min(1).optional(),
  /**
   * Tries to connect (0.5 s, 1 s, 2 s ... apart) while the API server has never answered;
   * then CRDM_UNREACHABLE. Once it has answered, failures are retried as any request is.
   */
  connectAttempts: z.number().int().min(1).max(20).default(3),
  logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /** json or text (time, level, message, key=value); unset: text on a terminal, JSON otherwise (src/log.ts). */
  logFormat: z.enum(LOG_FORMATS).optional(),
  /** `migrate` off a terminal: a progress line per CRD in flight every this many seconds; 0: no progress lines. */
  progressEvery: z.number().min(0).max(3600).default(5),
  annotations: z
    .strictObject({
      /**
       * The key that freezes a CRD's storage version (value "true"): KEP-2855's own. It is
       * configurable so a cluster running another KEP-2855 migrator can keep the two apart.
       */
      migrating: annotationKey.default('ksvm.sigs.k8s.io/migrating'),
    })
    .prefault({}),
  identities: z
    .strictObject({
      /** The migrator's identity: the ServiceAccount the Helm chart deploys. */
      migratorUsers: z.array(z.string().min(1)).default(['system:serviceaccount:crd-migrator:crd-migrator']),
      migratorGroups: z.array(z.string().min(1)).default([]),
      breakGlassGroups: z.array(z.string().min(1)).default(['system:masters']),
      /**
       * Kubernetes' own storage version migrator (kube-controller-manager): the only users,
       * besides the migrator and break-glass groups, who may add, remove or change a CRD's
       * StorageMigrating condition, which freezes its storage version. kube-controller-manager
       * writes it as its own user, or with --use-service-account-credentials (kubeadm) as
       * the controller's ServiceAccount, whose name counts only with a ServiceAccount token
       * (config/identities.ts). Requests of these users that change only the condition skip
       * the webhook (a webhook outage must not stall built-in migrations elsewhere).
       */
      builtinMigratorUsers: z
        .array(z.string().min(1))
        .default(['system:kube-controller-manager', 'system:serviceaccount:kube-system:storage-version-migrator-controller']),
    })
    .prefault({}),
  webhook: z
    .strictObject({
      enabled: z.boolean().default(true),
      host: z.string().default('0.0.0.0'),
      /** HTTPS port of the webhook; 0 picks a free one (tests). */
      port: z.number().int().min(0).max(65535).default(9443),
      certFile: z.string().default('/tls/tls.crt'),
      keyFile: z.string().default('/tls/tls.key'),
      /**
       * The API server sends object AND oldObject, and a stored CRD is at most ~1.5 MB
       * (etcd's request limit), so two of them plus the envelope fit in 3 MiB, which is also
       * the API server's own limit for a request body. Every byte accepted is CPU spent
       * parsing on the one event loop all reviews share, so no more than that.
       */
      bodyLimitBytes: z
        .number()
        .int()
        .min(1024)
        .default(3 * 1024 * 1024),
      /**
       * Connections the webhook keeps open at most (Node's server.maxConnections); one past
       * it is closed as soon as it is accepted, counted in
       * crd_migrator_webhook_connections_refused_total and warned about. An idle TLS
       * connection holds 65-80 KiB of the process (5,000 of them took serve from 98 to 426
       * MiB, dev/bench/idle-connections.ts), so with no cap anyone who can reach the port
       * could push the pod past its 512 Mi limit; 1,000 of them took it to 179 MiB. The API
       * servers need far fewer: client-go keeps at most 25 idle connections per webhook
       * host, and reviews of CRD writes are few.
       */
      maxConnections: z.number().int().min(1).default(1000),
      /**
       * Connections one peer (remote address) other than the API server keeps open at most
       * (webhook/connection-policy.ts): one client holding the whole of maxConnections and
       * re-opening a connection every 100 ms took every slot the API server's pooled
       * connection gave up, and every review failed with EOF (issue 44). At the cap the
       * peer's oldest idle connection is closed, not the new one. client-go keeps at most 25
       * idle connections per webhook host; a burst of CRD writes seldom needs more.
       */
      maxConnectionsPerPeer: z.number().int().min(1).default(100),
      /**
       * The addresses (IPs or CIDRs) the API server's calls come from: connections from
       * them are exempt from maxConnectionsPerPeer, never evicted, and may take the
       * reservedConnections slots no other peer may. Empty: unknown, nothing reserved (the
       * per-peer cap and eviction still protect the API server from one client). The chart
       * passes networkPolicy.apiServerCIDRs.
       */
      apiServerAddresses: z.array(z.string().refine(isAddressOrCidr, { message: 'must be an IP address or a CIDR' })).default([]),
      /** Slots of maxConnections only apiServerAddresses may take (when they are set). */
      reservedConnections: z.number().int().min(0).default(100),
      /**
       * Timeouts of the HTTPS listener (file-only), and why (the API server calls us with
       * timeoutSeconds: 5, at most 30):
       * - tlsHandshakeSeconds: the TLS handshake must finish within it. Node's default is
       *   120 s, and none of the HTTP timeouts runs before the handshake is done, so a
       *   client that opens connections and never says hello would hold each for minutes.
       * - requestSeconds: the whole request, headers and body, must arrive within it, so a
       *   slow-loris client holds a socket this long at most (checked every
       *   connectionsCheckingIntervalSeconds); headersSeconds is kept below it.
       * - connectionSeconds: socket inactivity while a request is being served.
       * - keepAliveSeconds: just longer than the idle timeout of the API server's HTTP
       *   client (client-go's transport takes Go's http.DefaultTransport's 90 s), so the
       *   API server, not us, closes idle connections. If we closed first, a review sent on
       *   a connection we were closing would fail (Go retries a POST on a reused connection
       *   only when nothing was written), and with failurePolicy: Fail a failed call is a
       *   denied CRD update. Not shorter: what bounds the memory idle connections hold is
       *   maxConnections, not this; a client that wants to hold a connection sends a
       *   request now and then whatever the timeout.
       */
      timeouts: z
        .strictObject({
          tlsHandshakeSeconds: z.number().min(0.1).default(5),
          headersSeconds: z.number().min(0.1).default(5),
          requestSeconds: z.number().min(0.1).default(10),
          connectionSeconds: z.number().min(0.1).default(15),
          keepAliveSeconds: z.number().min(0.1).default(95),
          connectionsCheckingIntervalSeconds: z.number().min(0.1).default(2),
          /**
           * A connection that has not carried a valid AdmissionReview this long after it was
           * opened is closed (the API server sends its review at once). Connections held
           * open for nothing cost a slot each; with this they cost a TLS handshake every
           * few seconds instead.
           */
          firstReviewSeconds: z.number().min(0.1).default(5),
        })
        .prefault({})
        .refine((t) => t.headersSeconds <= t.requestSeconds, {
          message: 'headersSeconds must not be more than requestSeconds',
          path: ['headersSeconds'],
        }),
    })
    .prefault({})
    .refine((w) => w.maxConnectionsPerPeer <= w.maxConnections, {
      message: 'maxConnectionsPerPeer must not be more than maxConnections',
      path: ['maxConnectionsPerPeer'],
    })
    .refine((w) => w.reservedConnections < w.maxConnections, {
      message: 'reservedConnections must be less than maxConnections',
      path: ['reservedConnections'],
    }),
  metrics: z
    .strictObject({
      /**
       * The plain-HTTP ops listener: /metrics, /healthz and /readyz (health/plugin.ts), the
       * only listener that serves them. Port 0 turns it off, and with it the probes'
       * endpoints: meant for tests and local runs of several processes, never for a pod
       * (the chart refuses it).
       */
      host: z.string().default('0.0.0.0'),
      port: z.number().int().min(0).max(65535).default(8080),
    })
    .prefault({}),
  migrator: z
    .strictObject({
      enabled: z.boolean().default(true),
      selector: z
        .strictObject({
          /**
           * CRDs whose labels match are managed; empty selects none by label. The default is
           * the label users add to opt a CRD in.
           */
          labelSelector: z.string().default('crd-migrator.io/managed=true'),
          /** CRDs managed by name, whatever their labels. */
          names: z.array(z.string().min(1)).default([]),
        })
        .prefault({}),
      /** Writes in flight at most: the cap of the adaptive limit (migrator/adaptive-concurrency.ts). */
      concurrency: z.number().int().min(1).max(1024).default(64),
      /**
       * Writes started per second across a migration; 0 for no fixed limit, the default:
       * the adaptive limit follows the API server, and the chart's APF level shares it.
       */
      qps: z.number().min(0).default(0),
      /**
       * CRDs migrated at once by `migrate CRD...` and the controller, all under one write
       * budget: `concurrency` and `qps` then hold for the whole process (migrator/engine/budget.ts).
       */
      maxParallelCrds: z.number().int().min(1).max(256).default(4),
      pageSize: z.number().int().min(1).max(10000).default(500),
      maxAttempts: z.number().int().min(1).max(100).default(8),
      progressIntervalSeconds: z.number().min(0.1).default(5),
      /** A freeze whose owner has not written a heartbeat for this long is taken over. */
      takeoverAfterSeconds: z.number().min(1).default(30),
      skipPhases: z.array(PhaseName).default([]),
      /**
       * A CRD converted by a webhook: a run that finds the webhook down for longer than this
       * fails (freeze lifted, storedVersions untouched). Cert-manager rotations have been
       * measured at 60-90 s of unreachable webhooks.
       */
      conversionOutageLimitSeconds: z.number().min(1).default(300),
      /**
       * The API servers to ask one by one whether they store the new version (URLs, e.g.
       * https://10.0.0.1:6443), for control planes whose default/kubernetes EndpointSlices
       * do not list reachable addresses. Empty: those EndpointSlices.
       */
      apiServerEndpoints: z.array(z.url({ protocol: /^https?$/ })).default([]),
      /** Every API server must store the new version within this long after a storage flip. */
      storageSwitchTimeoutSeconds: z.number().min(1).default(120),
      /**
       * Who rewrites the objects (phase StorageVersionMigration): `own` (our writer) or
       * `builtin` (a storagemigration.k8s.io StorageVersionMigration run by
       * kube-controller-manager, inside our freeze, preflight, storage-switch and
       * storedVersions checks and cleanup).
       */
      engine: z.enum(['own', 'builtin']).default('own'),
      /** engine builtin: a run fails when kube-controller-manager has not started its StorageVersionMigration within this long. */
      builtinStartTimeoutSeconds: z.number().min(1).default(120),
      /** `migrate` waits this long for a conversion webhook that is down before freezing, then gives up. */
      conversionWaitSeconds: z.number().min(0).default(180),
      /**
       * Phase StashedObjectMigration (opt-in): copies of managed CRDs' objects stashed in
       * other objects are converted to the storage version (recreated, referrers repointed,
       * the old one deleted). Presets by name, e.g. kubevirt-instancetypes.
       */
      stashPresets: z.array(z.enum(STASH_PRESETS)).default([]),
      /** The same with rules spelt out (config file only). */
      stashes: z.array(StashRuleSchema).default([]),
      /**
       * Before any object is rewritten, prove the rewrite keeps its content (a narrowed
       * schema or an unfaithful conversion webhook would make a loss permanent); a
       * difference blocks the run with CRDM_DATA_LOSS. Off only to migrate knowingly.
       */
      losslessCheck: z.boolean().default(true),
      /**
       * Removals accepted on purpose, as `<crd name>:<field path>` (e.g.
       * `widgets.example.com:spec.token`, `widgets.example.com:spec.items[*].name`): a field
       * a new schema dropped deliberately. Only the migrator's own configuration can say so.
       */
      acceptRemovals: acceptEntries,
      /**
       * Changes accepted on purpose, as `<crd name>:<field path>`: any change the rewrite
       * makes at or below the path (removed, added, changed, moved), e.g. a field a new
       * release moves (`pipelineruns.tekton.dev:spec.timeout`) or adds.
       */
      acceptChanges: acceptEntries,
      /**
       * CRDs whose objects may be rewritten where no view can check them (stored in an
       * unserved version and without managedFields): their count is reported, not refused.
       */
      acceptUnchecked: z.array(z.string().min(1)).default([]),
      /**
       * Also take consent from the CRD's own annotations (`crd-migrator.io/accept-changes`,
       * `crd-migrator.io/accept-unchecked`). Only where the chart's ValidatingAdmissionPolicy
       * lets nobody set them without the `accept-changes` permission on that CRD (RBAC).
       */
      consentAnnotations: z.boolean().default(false),
      /** Also move managedFields of served non-storage versions to the storage version. */
      rewriteServedManagedFields: z.boolean().default(false),
      /**
       * File holding the key that seals checkpoints (at least 16 bytes); a resumed run trusts
       * only checkpoints sealed with it. Unset: a file in $XDG_STATE_HOME/crd-migrator.
       */
      stateKeyFile: z.string().min(1).optional(),
      /**
       * Refuse a state key file (and its directory) that others could read or replace:
       * readable by others, by a group other than the process's own, owned by a user other
       * than this process's or root, or a directory writable by others without the sticky
       * bit. Off: such a file is used with a warning naming it and its mode.
       */
      strictStateKeyFile: z.boolean().default(false),
      /**
       * Reconcile kube-storage-version-migrator's StorageVersionMigration objects
       * (migration.k8s.io/v1alpha1, KEP-2855): each names a resource to migrate, a custom
       * resource or a built-in one. Needs that CRD installed (the chart can install it).
       */
      storageVersionMigrations: z.boolean().default(false),
      /**
       * A StorageVersionMigration (or the trigger's) naming a CRD the selector does not
       * manage: `rewrite` every object without freezing the CRD, and narrow
       * status.storedVersions only if its generation did not change meanwhile (what KSVM
       * and the built-in migrator do), or `refuse` it (Failed, reason NotManaged). Only a
       * managed CRD is ever frozen through these objects.
       */
      storageVersionMigrationsUnmanaged: z.enum(['rewrite', 'refuse']).default('rewrite'),
      /**
       * kube-storage-version-migrator's trigger (serve, leader only): a StorageState
       * (migration.k8s.io/v1alpha1) per resource kept from discovery's storageVersionHash,
       * and a StorageVersionMigration created when a resource's hash changes. Needs the
       * StorageState and StorageVersionMigration CRDs installed (the chart can install them).
       */
      ksvmTrigger: z
        .strictObject({
          enabled: z.boolean().default(false),
          /** How often discovery is read (KSVM: 10 minutes); a CRD's storage flip is seen at once through the CRD watch. */
          pollSeconds: z.number().min(1).default(600),
        })
        .prefault({}),
      /** How often every selected CRD is looked at again, besides watch events. */
      resyncSeconds: z.number().min(1).default(600),
      /** Per-CRD options, by CRD name. */
      crds: z.record(z.string().min(1), CrdOptionsSchema).default({}),
    })
    .prefault({}),
  leaderElection: z
    .strictObject({
      enabled: z.boolean().default(true),
      /** Namespace of the Lease; $POD_NAMESPACE, then `default`, when unset. */
      namespace: z.string().min(1).optional(),
      leaseName: z.string().min(1).default('crd-migrator'),
      leaseDurationSeconds: z.number().int().min(2).default(15),
      renewDeadlineSeconds: z.number().int().min(1).default(10),
      retryPeriodSeconds: z.number().min(0.1).default(2),
    })
    .prefault({})
    .refine((l) => l.renewDeadlineSeconds < l.leaseDurationSeconds, {
      message: 'renewDeadlineSeconds must be less than leaseDurationSeconds',
      path: ['renewDeadlineSeconds'],
    }),
})

export type Config = z.infer<typeof ConfigSchema>
export type CrdOptions = z.infer<typeof CrdOptionsSchema>
export type ConfigInput = z.input<typeof ConfigSchema>

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
