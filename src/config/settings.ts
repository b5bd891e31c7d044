/** Settings given as a flag or an environment variable, each mapped to a config path: one table drives CLI, environment and docs so they cannot drift. */
import { ConfigError } from '../errors.js'
import { splitList } from './accept-entries.js'

export type SettingKind = 'string' | 'int' | 'number' | 'boolean' | 'list'

export type Setting = ReturnType<typeof setting>

/** One row of the table; the environment variable is the flag upper-snake-cased under CRD_MIGRATOR_, unless given. */
function setting(
  path: string,
  flag: string,
  kind: SettingKind,
  description: string,
  env = `CRD_MIGRATOR_${flag.toUpperCase().replaceAll('-', '_')}`,
) {
  return { path, flag, env, kind, description }
}

export const SETTINGS: readonly Setting[] = [
  setting(
    'kubeconfig',
    'kubeconfig',
    'string',
    'kubeconfig file; when unset, $KUBECONFIG, ~/.kube/config, then the in-cluster service account',
  ),
  setting('context', 'context', 'string', "kubeconfig context to use instead of the kubeconfig's current-context"),
  setting(
    'connectAttempts',
    'connect-attempts',
    'int',
    'tries to connect to an API server that has not answered yet before giving up with CRDM_UNREACHABLE',
  ),
  setting('logLevel', 'log-level', 'string', 'how much is logged'),
  setting(
    'logFormat',
    'log-format',
    'string',
    'json, or text (time, level, message, key=value); unset: text (serve: text on a terminal, json otherwise)',
  ),
  setting(
    'progressEvery',
    'progress-every',
    'number',
    'migrate, off a terminal (a pipe, CI): seconds between progress lines per CRD in flight (default 5); 0: no progress lines',
  ),
  setting('annotations.migrating', 'migrating-annotation', 'string', 'annotation key that freezes a CRD\'s storage version (value "true")'),
  setting(
    'identities.migratorUsers',
    'migrator-users',
    'list',
    'usernames allowed to set or remove the migrating annotation (comma-separated)',
  ),
  setting('identities.migratorGroups', 'migrator-groups', 'list', 'groups allowed to set or remove the migrating annotation'),
  setting('identities.breakGlassGroups', 'break-glass-groups', 'list', 'groups allowed everything, the freeze included'),
  setting(
    'identities.builtinMigratorUsers',
    'builtin-migrator-users',
    'list',
    "usernames of Kubernetes' built-in storage version migrator (kube-controller-manager), allowed to change a CRD's StorageMigrating condition",
  ),
  setting('webhook.enabled', 'webhook', 'boolean', 'serve the validating webhook (serve only)', 'CRD_MIGRATOR_WEBHOOK_ENABLED'),
  setting('webhook.host', 'webhook-host', 'string', 'address the webhook listens on'),
  setting('webhook.port', 'webhook-port', 'int', 'HTTPS port of the webhook'),
  setting('webhook.certFile', 'tls-cert', 'string', 'serving certificate (PEM); reloaded when it changes'),
  setting('webhook.keyFile', 'tls-key', 'string', 'serving key (PEM); reloaded when it changes'),
  setting('webhook.bodyLimitBytes', 'body-limit-bytes', 'int', 'largest AdmissionReview accepted'),
  setting(
    'webhook.maxConnections',
    'webhook-max-connections',
    'int',
    'connections the webhook keeps open at most; one past it is closed at once',
  ),
  setting(
    'webhook.maxConnectionsPerPeer',
    'webhook-max-connections-per-peer',
    'int',
    "connections one address other than the API server's keeps open at most; past it, its oldest idle one is closed",
  ),
  setting(
    'webhook.apiServerAddresses',
    'webhook-apiserver-addresses',
    'list',
    'IPs or CIDRs the API server calls the webhook from: no per-peer cap, never evicted, and the reserved slots',
  ),
  setting(
    'webhook.reservedConnections',
    'webhook-reserved-connections',
    'int',
    'slots of webhook.maxConnections only the API server addresses may take (when set)',
  ),
  setting(
    'metrics.port',
    'metrics-port',
    'int',
    "plain-HTTP port for /metrics, /healthz, /readyz, the only listener serving them (0: off, and with it the probes' endpoints)",
  ),
  setting('migrator.enabled', 'migrator', 'boolean', 'run the migration controller (serve only)', 'CRD_MIGRATOR_MIGRATOR_ENABLED'),
  setting('migrator.selector.labelSelector', 'selector', 'string', 'label selector of the CRDs to act on (managed CRDs), as kubectl -l'),
  setting('migrator.selector.names', 'crds', 'list', 'names of managed CRDs, besides the selector'),
  setting('migrator.concurrency', 'concurrency', 'int', 'writes in flight at most, per migration: the cap of the adaptive limit'),
  setting('migrator.qps', 'qps', 'number', 'writes started per second at most (0: no fixed rate, the adaptive limit alone)'),
  setting(
    'migrator.maxParallelCrds',
    'max-parallel-crds',
    'int',
    'CRDs migrated at once (migrate and the controller), all under one budget of --concurrency and --qps',
  ),
  setting('migrator.pageSize', 'page-size', 'int', 'objects per list page'),
  setting('migrator.maxAttempts', 'max-attempts', 'int', 'tries per write before the object counts as failed'),
  setting('migrator.skipPhases', 'skip-phases', 'list', 'phases not to run'),
  setting('migrator.stashPresets', 'stash-presets', 'list', 'migrate copies of CRs stashed in other objects, by preset'),
  setting(
    'migrator.losslessCheck',
    'lossless-check',
    'boolean',
    "prove every rewrite keeps each object's content before writing any, else CRDM_DATA_LOSS (--no-lossless-check turns it off)",
  ),
  setting(
    'migrator.acceptRemovals',
    'accept-removals',
    'list',
    'fields the rewrite may drop on purpose, as <crd name>:<field path> (e.g. widgets.example.com:spec.token)',
  ),
  setting(
    'migrator.acceptChanges',
    'accept-changes',
    'list',
    'fields the rewrite may change on purpose (removed, added, changed or moved, at or below the path), as <crd name>:<field path> (e.g. pipelineruns.tekton.dev:spec.timeout)',
  ),
  setting(
    'migrator.acceptUnchecked',
    'accept-unchecked',
    'list',
    'CRDs whose objects no view can check (stored in an unserved version, no managedFields) may be rewritten anyway',
  ),
  setting(
    'migrator.consentAnnotations',
    'consent-annotations',
    'boolean',
    "also take consent from the CRD's crd-migrator.io/accept-changes and accept-unchecked annotations (only where the chart's ValidatingAdmissionPolicy guards them)",
  ),
  setting(
    'migrator.rewriteServedManagedFields',
    'rewrite-served-managed-fields',
    'boolean',
    'also move managedFields of served non-storage versions to the storage version',
  ),
  setting(
    'migrator.conversionOutageLimitSeconds',
    'conversion-outage-limit-seconds',
    'number',
    "a run fails when the CRD's conversion webhook stays down this long",
  ),
  setting(
    'migrator.apiServerEndpoints',
    'apiserver-endpoints',
    'list',
    'API servers to ask one by one whether they store the new version (default: the default/kubernetes EndpointSlices)',
  ),
  setting(
    'migrator.storageSwitchTimeoutSeconds',
    'storage-switch-timeout-seconds',
    'number',
    'how long every API server may take to store the new version after a storage flip',
  ),
  setting(
    'migrator.engine',
    'engine',
    'string',
    "who rewrites the objects: own (crd-migrator's writer) or builtin (Kubernetes' StorageVersionMigration, run by kube-controller-manager, inside crd-migrator's freeze and checks)",
  ),
  setting(
    'migrator.builtinStartTimeoutSeconds',
    'builtin-start-timeout-seconds',
    'number',
    'engine builtin: a run fails when kube-controller-manager has not started its StorageVersionMigration within this long',
  ),
  setting(
    'migrator.conversionWaitSeconds',
    'conversion-wait-seconds',
    'number',
    'migrate: how long to wait for a conversion webhook that is down before freezing',
  ),
  setting('migrator.progressIntervalSeconds', 'progress-interval-seconds', 'number', 'how often progress annotations are written'),
  setting(
    'migrator.takeoverAfterSeconds',
    'takeover-after-seconds',
    'number',
    'heartbeat age after which a frozen migration of ours is resumed',
  ),
  setting(
    'migrator.stateKeyFile',
    'state-key-file',
    'string',
    'key that seals checkpoints, so a resumed run trusts only its own (default: $XDG_STATE_HOME/crd-migrator/state.key, created on first use)',
  ),
  setting(
    'migrator.strictStateKeyFile',
    'strict-state-key-file',
    'boolean',
    'refuse a state key file that others could read or replace, instead of warning',
  ),
  setting(
    'migrator.storageVersionMigrations',
    'storage-version-migrations',
    'boolean',
    'reconcile StorageVersionMigration objects (migration.k8s.io/v1alpha1) (serve only)',
  ),
  setting(
    'migrator.storageVersionMigrationsUnmanaged',
    'storage-version-migrations-unmanaged',
    'string',
    'a StorageVersionMigration for a CRD the selector does not manage: rewrite (its objects, without freezing it) or refuse (Failed)',
  ),
  setting(
    'migrator.ksvmTrigger.enabled',
    'ksvm-trigger',
    'boolean',
    "keep kube-storage-version-migrator's StorageStates and create a StorageVersionMigration when a resource's storage version hash changes (serve only)",
  ),
  setting('migrator.ksvmTrigger.pollSeconds', 'ksvm-trigger-poll-seconds', 'number', 'how often the trigger reads discovery'),
  setting('migrator.resyncSeconds', 'resync-seconds', 'number', 'how often every managed CRD is looked at again'),
  setting('leaderElection.enabled', 'leader-elect', 'boolean', 'take a Lease before migrating (serve only)'),
  setting('leaderElection.namespace', 'lease-namespace', 'string', 'namespace of the Lease', 'POD_NAMESPACE'),
  setting('leaderElection.leaseName', 'lease-name', 'string', 'name of the Lease'),
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
