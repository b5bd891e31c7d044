/** Settings given as a flag or an environment variable, each mapped to a config path: one table drives CLI, environment and docs so they cannot drift. */
import { ConfigError } from '../errors.js'
import { splitList } from './accept-entries.js'

export type SettingKind = 'string' | 'int' | 'number' | 'boolean' | 'list'

export interface Setting {
  path: string
  flag: string
  env: string
  kind: SettingKind
  description: string
}

export const SETTINGS: readonly Setting[] = [
  {
    path: 'kubeconfig',
    flag: 'kubeconfig',
    env: 'CRD_MIGRATOR_KUBECONFIG',
    kind: 'string',
    description: 'kubeconfig file; when unset, $KUBECONFIG, ~/.kube/config, then the in-cluster service account',
  },
  {
    path: 'context',
    flag: 'context',
    env: 'CRD_MIGRATOR_CONTEXT',
    kind: 'string',
    description: "kubeconfig context to use instead of the kubeconfig's current-context",
  },
  {
    path: 'connectAttempts',
    flag: 'connect-attempts',
    env: 'CRD_MIGRATOR_CONNECT_ATTEMPTS',
    kind: 'int',
    description: 'tries to connect to an API server that has not answered yet before giving up with CRDM_UNREACHABLE',
  },
  {
    path: 'logLevel',
    flag: 'log-level',
    env: 'CRD_MIGRATOR_LOG_LEVEL',
    kind: 'string',
    description: 'how much is logged',
  },
  {
    path: 'logFormat',
    flag: 'log-format',
    env: 'CRD_MIGRATOR_LOG_FORMAT',
    kind: 'string',
    description: 'json, or text (time, level, message, key=value); unset: text (serve: text on a terminal, json otherwise)',
  },
  {
    path: 'progressEvery',
    flag: 'progress-every',
    env: 'CRD_MIGRATOR_PROGRESS_EVERY',
    kind: 'number',
    description: 'migrate, off a terminal (a pipe, CI): seconds between progress lines per CRD in flight (default 5); 0: no progress lines',
  },
  {
    path: 'annotations.migrating',
    flag: 'migrating-annotation',
    env: 'CRD_MIGRATOR_MIGRATING_ANNOTATION',
    kind: 'string',
    description: 'annotation key that freezes a CRD\'s storage version (value "true")',
  },
  {
    path: 'identities.migratorUsers',
    flag: 'migrator-users',
    env: 'CRD_MIGRATOR_MIGRATOR_USERS',
    kind: 'list',
    description: 'usernames allowed to set or remove the migrating annotation (comma-separated)',
  },
  {
    path: 'identities.migratorGroups',
    flag: 'migrator-groups',
    env: 'CRD_MIGRATOR_MIGRATOR_GROUPS',
    kind: 'list',
    description: 'groups allowed to set or remove the migrating annotation',
  },
  {
    path: 'identities.breakGlassGroups',
    flag: 'break-glass-groups',
    env: 'CRD_MIGRATOR_BREAK_GLASS_GROUPS',
    kind: 'list',
    description: 'groups allowed everything, the freeze included',
  },
  {
    path: 'identities.builtinMigratorUsers',
    flag: 'builtin-migrator-users',
    env: 'CRD_MIGRATOR_BUILTIN_MIGRATOR_USERS',
    kind: 'list',
    description:
      "usernames of Kubernetes' built-in storage version migrator (kube-controller-manager), allowed to change a CRD's StorageMigrating condition",
  },
  {
    path: 'webhook.enabled',
    flag: 'webhook',
    env: 'CRD_MIGRATOR_WEBHOOK_ENABLED',
    kind: 'boolean',
    description: 'serve the validating webhook (serve only)',
  },
  {
    path: 'webhook.host',
    flag: 'webhook-host',
    env: 'CRD_MIGRATOR_WEBHOOK_HOST',
    kind: 'string',
    description: 'address the webhook listens on',
  },
  { path: 'webhook.port', flag: 'webhook-port', env: 'CRD_MIGRATOR_WEBHOOK_PORT', kind: 'int', description: 'HTTPS port of the webhook' },
  {
    path: 'webhook.certFile',
    flag: 'tls-cert',
    env: 'CRD_MIGRATOR_TLS_CERT',
    kind: 'string',
    description: 'serving certificate (PEM); reloaded when it changes',
  },
  {
    path: 'webhook.keyFile',
    flag: 'tls-key',
    env: 'CRD_MIGRATOR_TLS_KEY',
    kind: 'string',
    description: 'serving key (PEM); reloaded when it changes',
  },
  {
    path: 'webhook.bodyLimitBytes',
    flag: 'body-limit-bytes',
    env: 'CRD_MIGRATOR_BODY_LIMIT_BYTES',
    kind: 'int',
    description: 'largest AdmissionReview accepted',
  },
  {
    path: 'webhook.maxConnections',
    flag: 'webhook-max-connections',
    env: 'CRD_MIGRATOR_WEBHOOK_MAX_CONNECTIONS',
    kind: 'int',
    description: 'connections the webhook keeps open at most; one past it is closed at once',
  },
  {
    path: 'webhook.maxConnectionsPerPeer',
    flag: 'webhook-max-connections-per-peer',
    env: 'CRD_MIGRATOR_WEBHOOK_MAX_CONNECTIONS_PER_PEER',
    kind: 'int',
    description: "connections one address other than the API server's keeps open at most; past it, its oldest idle one is closed",
  },
  {
    path: 'webhook.apiServerAddresses',
    flag: 'webhook-apiserver-addresses',
    env: 'CRD_MIGRATOR_WEBHOOK_APISERVER_ADDRESSES',
    kind: 'list',
    description: 'IPs or CIDRs the API server calls the webhook from: no per-peer cap, never evicted, and the reserved slots',
  },
  {
    path: 'webhook.reservedConnections',
    flag: 'webhook-reserved-connections',
    env: 'CRD_MIGRATOR_WEBHOOK_RESERVED_CONNECTIONS',
    kind: 'int',
    description: 'slots of webhook.maxConnections only the API server addresses may take (when set)',
  },
  {
    path: 'metrics.port',
    flag: 'metrics-port',
    env: 'CRD_MIGRATOR_METRICS_PORT',
    kind: 'int',
    description:
      "plain-HTTP port for /metrics, /healthz, /readyz, the only listener serving them (0: off, and with it the probes' endpoints)",
  },
  {
    path: 'migrator.enabled',
    flag: 'migrator',
    env: 'CRD_MIGRATOR_MIGRATOR_ENABLED',
    kind: 'boolean',
    description: 'run the migration controller (serve only)',
  },
  {
    path: 'migrator.selector.labelSelector',
    flag: 'selector',
    env: 'CRD_MIGRATOR_SELECTOR',
    kind: 'string',
    description: 'label selector of the CRDs to act on (managed CRDs), as kubectl -l',
  },
  {
    path: 'migrator.selector.names',
    flag: 'crds',
    env: 'CRD_MIGRATOR_CRDS',
    kind: 'list',
    description: 'names of managed CRDs, besides the selector',
  },
  {
    path: 'migrator.concurrency',
    flag: 'concurrency',
    env: 'CRD_MIGRATOR_CONCURRENCY',
    kind: 'int',
    description: 'writes in flight at most, per migration: the cap of the adaptive limit',
  },
  {
    path: 'migrator.qps',
    flag: 'qps',
    env: 'CRD_MIGRATOR_QPS',
    kind: 'number',
    description: 'writes started per second at most (0: no fixed rate, the adaptive limit alone)',
  },
  {
    path: 'migrator.maxParallelCrds',
    flag: 'max-parallel-crds',
    env: 'CRD_MIGRATOR_MAX_PARALLEL_CRDS',
    kind: 'int',
    description: 'CRDs migrated at once (migrate and the controller), all under one budget of --concurrency and --qps',
  },
  { path: 'migrator.pageSize', flag: 'page-size', env: 'CRD_MIGRATOR_PAGE_SIZE', kind: 'int', description: 'objects per list page' },
  {
    path: 'migrator.maxAttempts',
    flag: 'max-attempts',
    env: 'CRD_MIGRATOR_MAX_ATTEMPTS',
    kind: 'int',
    description: 'tries per write before the object counts as failed',
  },
  {
    path: 'migrator.skipPhases',
    flag: 'skip-phases',
    env: 'CRD_MIGRATOR_SKIP_PHASES',
    kind: 'list',
    description: 'phases not to run',
  },
  {
    path: 'migrator.stashPresets',
    flag: 'stash-presets',
    env: 'CRD_MIGRATOR_STASH_PRESETS',
    kind: 'list',
    description: 'migrate copies of CRs stashed in other objects, by preset',
  },
  {
    path: 'migrator.losslessCheck',
    flag: 'lossless-check',
    env: 'CRD_MIGRATOR_LOSSLESS_CHECK',
    kind: 'boolean',
    description:
      "prove every rewrite keeps each object's content before writing any, else CRDM_DATA_LOSS (--no-lossless-check turns it off)",
  },
  {
    path: 'migrator.acceptRemovals',
    flag: 'accept-removals',
    env: 'CRD_MIGRATOR_ACCEPT_REMOVALS',
    kind: 'list',
    description: 'fields the rewrite may drop on purpose, as <crd name>:<field path> (e.g. widgets.example.com:spec.token)',
  },
  {
    path: 'migrator.acceptChanges',
    flag: 'accept-changes',
    env: 'CRD_MIGRATOR_ACCEPT_CHANGES',
    kind: 'list',
    description:
      'fields the rewrite may change on purpose (removed, added, changed or moved, at or below the path), as <crd name>:<field path> (e.g. pipelineruns.tekton.dev:spec.timeout)',
  },
  {
    path: 'migrator.acceptUnchecked',
    flag: 'accept-unchecked',
    env: 'CRD_MIGRATOR_ACCEPT_UNCHECKED',
    kind: 'list',
    description: 'CRDs whose objects no view can check (stored in an unserved version, no managedFields) may be rewritten anyway',
  },
  {
    path: 'migrator.consentAnnotations',
    flag: 'consent-annotations',
    env: 'CRD_MIGRATOR_CONSENT_ANNOTATIONS',
    kind: 'boolean',
    description:
      "also take consent from the CRD's crd-migrator.io/accept-changes and accept-unchecked annotations (only where the chart's ValidatingAdmissionPolicy guards them)",
  },
  {
    path: 'migrator.rewriteServedManagedFields',
    flag: 'rewrite-served-managed-fields',
    env: 'CRD_MIGRATOR_REWRITE_SERVED_MANAGED_FIELDS',
    kind: 'boolean',
    description: 'also move managedFields of served non-storage versions to the storage version',
  },
  {
    path: 'migrator.conversionOutageLimitSeconds',
    flag: 'conversion-outage-limit-seconds',
    env: 'CRD_MIGRATOR_CONVERSION_OUTAGE_LIMIT_SECONDS',
    kind: 'number',
    description: "a run fails when the CRD's conversion webhook stays down this long",
  },
  {
    path: 'migrator.apiServerEndpoints',
    flag: 'apiserver-endpoints',
    env: 'CRD_MIGRATOR_APISERVER_ENDPOINTS',
    kind: 'list',
    description: 'API servers to ask one by one whether they store the new version (default: the default/kubernetes EndpointSlices)',
  },
  {
    path: 'migrator.storageSwitchTimeoutSeconds',
    flag: 'storage-switch-timeout-seconds',
    env: 'CRD_MIGRATOR_STORAGE_SWITCH_TIMEOUT_SECONDS',
    kind: 'number',
    description: 'how long every API server may take to store the new version after a storage flip',
  },
  {
    path: 'migrator.engine',
    flag: 'engine',
    env: 'CRD_MIGRATOR_ENGINE',
    kind: 'string',
    description:
      "who rewrites the objects: own (crd-migrator's writer) or builtin (Kubernetes' StorageVersionMigration, run by kube-controller-manager, inside crd-migrator's freeze and checks)",
  },
  {
    path: 'migrator.builtinStartTimeoutSeconds',
    flag: 'builtin-start-timeout-seconds',
    env: 'CRD_MIGRATOR_BUILTIN_START_TIMEOUT_SECONDS',
    kind: 'number',
    description: 'engine builtin: a run fails when kube-controller-manager has not started its StorageVersionMigration within this long',
  },
  {
    path: 'migrator.conversionWaitSeconds',
    flag: 'conversion-wait-seconds',
    env: 'CRD_MIGRATOR_CONVERSION_WAIT_SECONDS',
    kind: 'number',
    description: 'migrate: how long to wait for a conversion webhook that is down before freezing',
  },
  {
    path: 'migrator.progressIntervalSeconds',
    flag: 'progress-interval-seconds',
    env: 'CRD_MIGRATOR_PROGRESS_INTERVAL_SECONDS',
    kind: 'number',
    description: 'how often progress annotations are written',
  },
  {
    path: 'migrator.takeoverAfterSeconds',
    flag: 'takeover-after-seconds',
    env: 'CRD_MIGRATOR_TAKEOVER_AFTER_SECONDS',
    kind: 'number',
    description: 'heartbeat age after which a frozen migration of ours is resumed',
  },
  {
    path: 'migrator.stateKeyFile',
    flag: 'state-key-file',
    env: 'CRD_MIGRATOR_STATE_KEY_FILE',
    kind: 'string',
    description:
      'key that seals checkpoints, so a resumed run trusts only its own (default: $XDG_STATE_HOME/crd-migrator/state.key, created on first use)',
  },
  {
    path: 'migrator.strictStateKeyFile',
    flag: 'strict-state-key-file',
    env: 'CRD_MIGRATOR_STRICT_STATE_KEY_FILE',
    kind: 'boolean',
    description: 'refuse a state key file that others could read or replace, instead of warning',
  },
  {
    path: 'migrator.storageVersionMigrations',
    flag: 'storage-version-migrations',
    env: 'CRD_MIGRATOR_STORAGE_VERSION_MIGRATIONS',
    kind: 'boolean',
    description: 'reconcile StorageVersionMigration objects (migration.k8s.io/v1alpha1) (serve only)',
  },
  {
    path: 'migrator.storageVersionMigrationsUnmanaged',
    flag: 'storage-version-migrations-unmanaged',
    env: 'CRD_MIGRATOR_STORAGE_VERSION_MIGRATIONS_UNMANAGED',
    kind: 'string',
    description:
      'a StorageVersionMigration for a CRD the selector does not manage: rewrite (its objects, without freezing it) or refuse (Failed)',
  },
  {
    path: 'migrator.ksvmTrigger.enabled',
    flag: 'ksvm-trigger',
    env: 'CRD_MIGRATOR_KSVM_TRIGGER',
    kind: 'boolean',
    description:
      "keep kube-storage-version-migrator's StorageStates and create a StorageVersionMigration when a resource's storage version hash changes (serve only)",
  },
  {
    path: 'migrator.ksvmTrigger.pollSeconds',
    flag: 'ksvm-trigger-poll-seconds',
    env: 'CRD_MIGRATOR_KSVM_TRIGGER_POLL_SECONDS',
    kind: 'number',
    description: 'how often the trigger reads discovery',
  },
  {
    path: 'migrator.resyncSeconds',
    flag: 'resync-seconds',
    env: 'CRD_MIGRATOR_RESYNC_SECONDS',
    kind: 'number',
    description: 'how often every managed CRD is looked at again',
  },
  {
    path: 'leaderElection.enabled',
    flag: 'leader-elect',
    env: 'CRD_MIGRATOR_LEADER_ELECT',
    kind: 'boolean',
    description: 'take a Lease before migrating (serve only)',
  },
  {
    path: 'leaderElection.namespace',
    flag: 'lease-namespace',
    env: 'POD_NAMESPACE',
    kind: 'string',
    description: 'namespace of the Lease',
  },
  {
    path: 'leaderElection.leaseName',
    flag: 'lease-name',
    env: 'CRD_MIGRATOR_LEASE_NAME',
    kind: 'string',
    description: 'name of the Lease',
  },
]

export function parseSettingValue(setting: Setting, raw: string | boolean | readonly string[], source: string): unknown {
  // A list flag given more than once (`--accept-changes a --accept-changes b`): every one counts.
  if (typeof raw === 'object') {
    if (setting.kind !== 'list') return parseSettingValue(setting, raw[raw.length - 1] ?? '', source)
    return raw.flatMap((r) => splitList(r))
  }
  if (typeof raw === 'boolean') {
    if (setting.kind !== 'boolean') throw new ConfigError(`${source}: expects a value`)
    return raw
  }
  switch (setting.kind) {
    case 'string':
      return raw
    case 'list':
      return splitList(raw)
    case 'boolean':
      if (/^(true|1|yes)$/i.test(raw)) return true
      if (/^(false|0|no)$/i.test(raw)) return false
      throw new ConfigError(`${source}: expected true or false, got ${JSON.stringify(raw)}`)
    case 'int':
    case 'number': {
      const n = Number(raw)
      if (raw.trim() === '' || !Number.isFinite(n) || (setting.kind === 'int' && !Number.isInteger(n))) {
        throw new ConfigError(`${source}: expected ${setting.kind === 'int' ? 'an integer' : 'a number'}, got ${JSON.stringify(raw)}`)
      }
      return n
    }
  }
}
