/**
 * The ValidatingWebhookConfiguration of the storage freeze, as data. webhook-config/
 * validating-webhook.yaml is the 'service' render (a test keeps them equal); the local
 * dev flow renders the 'url' variant pointing at a webhook on this machine, trusted
 * through the development CA.
 *
 * Why it looks like this:
 * - rules: CREATE, UPDATE and DELETE of apiextensions.k8s.io/v1
 *   customresourcedefinitions, and UPDATE of their /status: the CRD status strategy keeps
 *   metadata from the new object, so annotations (the freeze itself) can be changed
 *   through /status, and status.storedVersions only there. DELETE of a frozen CRD would
 *   delete its custom resources mid-migration; CREATE could carry forged state.
 *   matchPolicy: Equivalent so a request through another served version still reaches
 *   us, converted to v1.
 * - matchConditions (CEL, GA in Kubernetes 1.30): the API server calls us only when the
 *   old or the new object carries the migrating annotation, or the request sets or
 *   changes one of the migrator's state annotations (STATE_PREFIX). A webhook that
 *   is down therefore blocks only CRDs under migration and forged state, which also
 *   breaks KEP-2855's cert-manager cycle: cert-manager's own CRDs can be upgraded
 *   whenever they are not being migrated, even if our certificate expired. Removing
 *   state annotations of a CRD that is not frozen is not sent (the webhook allows it, so
 *   installers that replace whole CRDs do not depend on the webhook). Also sent: spec
 *   changes and deletes of a CRD whose old object says `StorageMigrating=True` (Kubernetes'
 *   own migrator runs on it), and any change of a CRD's StorageMigrating condition (added,
 *   removed, its status changed), that freeze too, except by kube-controller-manager's own
 *   identities (builtinMigratorUsers, a ServiceAccount name only with a ServiceAccount
 *   token): the webhook allows them, so a webhook outage does not stall built-in
 *   migrations of CRDs we do not freeze (on a CRD we freeze, they are sent through the
 *   annotation anyway). `object` is null
 *   for DELETE and `oldObject` is null for CREATE, so both sides are guarded with
 *   `!= null`: an error under failurePolicy: Fail rejects the request.
 * - a second matchCondition skips the webhook for the migrator's own identities
 *   (migratorUsers, migratorGroups: those of the webhook's policy). The webhook would
 *   allow everything they do except moving storage, which the migrator never does, and
 *   an identity that may lift the freeze could move storage right after anyway; but
 *   going through the webhook made the migrator's progress writes and its final unfreeze
 *   fail whenever the webhook was down (failurePolicy: Fail), leaving the CRD frozen
 *   exactly when nobody could lift the freeze. Skipped, the migrator can always finish.
 *   A ServiceAccount username is skipped only with a ServiceAccount token's credential
 *   id (config/identities.ts): a client certificate named like it goes to the webhook,
 *   which refuses it the same way.
 * - two entries, the same but for one matchCondition and the path: the API server asks its
 *   own authorizer (CEL `authorizer`, in webhook matchConditions since 1.28, GA with them in
 *   1.30) whether the requester may `freeze` the CRD (FREEZE_PERMISSION: RBAC, cluster-admin
 *   through its wildcard, the chart's ClusterRole `<fullname>-freeze`), and sends the review
 *   to `/validate-crd/freeze-allowed` when it may, to `/validate-crd` when not. The webhook
 *   judges the first kind like a break-glass member (lift and repair the freeze, warned and
 *   audited; never move storage). Asked only for the requests that reach the webhook anyway
 *   (the condition comes last), in process, with no SubjectAccessReview, credentials or
 *   cache of the webhook's own; so a webhook-only install without a ServiceAccount token
 *   gets it too. The audit annotation's key names the entry: `storage-freeze-rbac.crd-migrator.io/reason`.
 * - failurePolicy: Fail: a freeze that lets changes through when the webhook is down is
 *   no freeze. timeoutSeconds: 5: a decision takes microseconds; a slow answer means a
 *   sick webhook, and the user should get the error quickly.
 */
import { stringify } from 'yaml'
import { DEFAULT_BUILTIN_MIGRATOR_USERS, DEFAULT_MIGRATING_ANNOTATION, DEFAULT_MIGRATOR_USERS } from '../config/annotations.js'
import { ANNOTATION_KEY } from '../config/schema.js'
import { CrdMigratorError } from '../errors.js'
import { STATE_PREFIX } from '../state/crd-state.js'
import { STORAGE_MIGRATING } from '../kube/builtin-migrations.js'
import {
  CREDENTIAL_ID_EXTRA,
  FREEZE_PERMISSION,
  isServiceAccountUsername,
  SERVICE_ACCOUNT_CREDENTIAL_PREFIX,
} from '../config/identities.js'

export const DEFAULT_WEBHOOK_CONFIGURATION_NAME = 'crd-migrator.crd-migrator.io'
export const WEBHOOK_NAME = 'storage-freeze.crd-migrator.io'
/** The entry for requesters RBAC allows to freeze the CRD (see the header). */
export const WEBHOOK_RBAC_NAME = 'storage-freeze-rbac.crd-migrator.io'
/** The path suffix of that entry: VALIDATE_FREEZE_ALLOWED_PATH (plugins/validate.ts) of the service's path. */
export const FREEZE_ALLOWED_SUFFIX = '/freeze-allowed'
export const DEFAULT_WEBHOOK_SERVICE = Object.freeze({
  namespace: 'crd-migrator',
  name: 'crd-migrator',
  path: '/validate-crd',
  port: 443,
})
/** The cert-manager Certificate (namespace/name) whose CA cert-manager's cainjector injects. */
export const DEFAULT_CERT_MANAGER_CERTIFICATE = 'crd-migrator/crd-migrator-serving'

export interface WebhookConfigurationOptions {
  mode: 'service' | 'url'
  /** Required in url mode, e.g. https://127.0.0.1:9443/validate-crd */
  url?: string
  /** PEM of the CA that signed the serving certificate; base64-encoded into caBundle. */
  caBundlePem?: string
  /** Migrating annotation key the matchConditions test for. */
  annotationKey?: string
  /** metadata.name of the configuration. */
  name?: string
  /** Service reference in service mode. */
  service?: Partial<typeof DEFAULT_WEBHOOK_SERVICE>
  /** In service mode without caBundlePem: the cert-manager Certificate to inject the CA from. */
  certManagerCertificate?: string
  timeoutSeconds?: number
  /** Usernames the API server does not send to the webhook. Default DEFAULT_MIGRATOR_USERS. */
  migratorUsers?: readonly string[]
  /** Groups the API server does not send to the webhook. Default none. */
  migratorGroups?: readonly string[]
  /** kube-controller-manager's usernames: their StorageMigrating condition writes are not sent. Default DEFAULT_BUILTIN_MIGRATOR_USERS. */
  builtinMigratorUsers?: readonly string[]
}

export interface MatchCondition {
  name: string
  expression: string
}

export interface WebhookClientConfig {
  url?: string
  service?: { namespace: string; name: string; path: string; port: number }
  caBundle?: string
}

export interface ValidatingWebhook {
  name: string
  admissionReviewVersions: string[]
  sideEffects: 'None'
  failurePolicy: 'Fail'
  matchPolicy: 'Equivalent'
  timeoutSeconds: number
  clientConfig: WebhookClientConfig
  rules: Array<{
    apiGroups: string[]
    apiVersions: string[]
    operations: string[]
    resources: string[]
    scope: string
  }>
  matchConditions: MatchCondition[]
}

export interface ValidatingWebhookConfiguration {
  apiVersion: 'admissionregistration.k8s.io/v1'
  kind: 'ValidatingWebhookConfiguration'
  metadata: { name: string; labels: Record<string, string>; annotations?: Record<string, string> }
  webhooks: ValidatingWebhook[]
}

/**
 * True when the old or the new object carries the migrating annotation, or the new object
 * sets or changes a state annotation (a key under STATE_PREFIX whose value differs from
 * the old object's, or that the old object lacks), or the old object says StorageMigrating=True
 * and the spec changes (or it is deleted), or someone but `builtinMigratorUsers` changes
 * the StorageMigrating condition.
 */
export function migrationStateMatchExpression(
  annotationKey: string,
  builtinMigratorUsers: readonly string[] = DEFAULT_BUILTIN_MIGRATOR_USERS,
): string {
  if (!ANNOTATION_KEY.test(annotationKey))
    throw new CrdMigratorError('CRDM_WEBHOOK_CONFIG', `not a valid annotation key: ${JSON.stringify(annotationKey)}`)
  const carries = (variable: string) =>
    `(${variable} != null && has(${variable}.metadata.annotations) && '${annotationKey}' in ${variable}.metadata.annotations)`
  const setsState =
    `(object != null && has(object.metadata.annotations) && object.metadata.annotations.exists(k, k.startsWith('${STATE_PREFIX}') && ` +
    `(oldObject == null || !has(oldObject.metadata.annotations) || !(k in oldObject.metadata.annotations) || ` +
    `oldObject.metadata.annotations[k] != object.metadata.annotations[k])))`
  // Kubernetes' own migrator runs on the CRD: spec changes and deletes are judged (its own
  // status writes change no spec and are not sent, so it can always finish).
  const builtinMigrating =
    `(oldObject != null && has(oldObject.status) && has(oldObject.status.conditions) && oldObject.status.conditions != null && ` +
    `oldObject.status.conditions.exists(c, c.type == '${STORAGE_MIGRATING}' && c.status == 'True') && ` +
    `(object == null || object.spec != oldObject.spec))`
  // The condition's statuses, in order, on each side: added, removed or flipped is a change.
  // A CRD's status.conditions is null (not absent) until the API server first writes one.
  const statuses = (variable: string) =>
    `(has(${variable}.status) && has(${variable}.status.conditions) && ${variable}.status.conditions != null ? ` +
    `${variable}.status.conditions.filter(c, c.type == '${STORAGE_MIGRATING}').map(c, c.status) : [])`
  const conditionChanged = `object != null && oldObject != null && ${statuses('object')} != ${statuses('oldObject')}`
  const kcm = identityMatchTerms(builtinMigratorUsers, [])
  const conditionByOthers = kcm.length > 0 ? `(${conditionChanged} && !(${kcm.join(' || ')}))` : `(${conditionChanged})`
  return `${carries('object')} || ${carries('oldObject')} || ${setsState} || ${builtinMigrating} || ${conditionByOthers}`
}

/**
 * A CEL string literal. JSON's escapes are a subset of CEL's, and escaping <, >, & and
 * U+2028/U+2029 the way Go's encoding/json does makes this equal to Helm's `toJson`, so
 * the chart renders the same expression.
 */
export function celString(value: string): string {
  return JSON.stringify(value).replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}

const celList = (values: readonly string[]) => `[${values.map(celString).join(',')}]`

/**
 * True unless the request comes from a migrator identity: a listed username (a
 * ServiceAccount name only with a ServiceAccount token's credential id) or a member of a
 * listed group. Empty lists are left out (an empty list would be a no-op term).
 */
export function notMigratorMatchExpression(migratorUsers: readonly string[], migratorGroups: readonly string[]): string | undefined {
  const terms = identityMatchTerms(migratorUsers, migratorGroups)
  return terms.length > 0 ? `!(${terms.join(' || ')})` : undefined
}

/** CEL terms, one of which holds for a request of these users (ServiceAccounts with a token's proof) or groups. */
function identityMatchTerms(users: readonly string[], groups: readonly string[]): string[] {
  const serviceAccounts = users.filter(isServiceAccountUsername)
  const others = users.filter((u) => !isServiceAccountUsername(u))
  const terms: string[] = []
  if (others.length > 0) terms.push(`request.userInfo.username in ${celList(others)}`)
  if (serviceAccounts.length > 0) {
    const extra = `request.userInfo.extra[${celString(CREDENTIAL_ID_EXTRA)}]`
    terms.push(
      `(request.userInfo.username in ${celList(serviceAccounts)} && has(request.userInfo.extra) && ` +
        `${celString(CREDENTIAL_ID_EXTRA)} in request.userInfo.extra && ${extra}.exists(c, c.startsWith(${celString(SERVICE_ACCOUNT_CREDENTIAL_PREFIX)})))`,
    )
  }
  if (groups.length > 0) terms.push(`request.userInfo.groups.exists(g, g in ${celList(groups)})`)
  return terms
}

/** True when the API server's authorizer allows the requester FREEZE_PERMISSION on the CRD of the request. */
export function freezeAllowedExpression(): string {
  const { group, resource, verb } = FREEZE_PERMISSION
  return `authorizer.group(${celString(group)}).resource(${celString(resource)}).name(request.name).check(${celString(verb)}).allowed()`
}

export function renderWebhookConfiguration(options: WebhookConfigurationOptions): ValidatingWebhookConfiguration {
  const annotationKey = options.annotationKey ?? DEFAULT_MIGRATING_ANNOTATION
  const notMigrator = notMigratorMatchExpression(options.migratorUsers ?? DEFAULT_MIGRATOR_USERS, options.migratorGroups ?? [])
  const clientConfig: WebhookClientConfig = {}
  const annotations: Record<string, string> = {}

  if (options.mode === 'url') {
    if (!options.url) throw new CrdMigratorError('CRDM_WEBHOOK_CONFIG', 'url mode needs a url, e.g. https://127.0.0.1:9443/validate-crd')
    if (!options.url.startsWith('https://'))
      throw new CrdMigratorError('CRDM_WEBHOOK_CONFIG', `webhook url must be https, got ${options.url}`)
    clientConfig.url = options.url
  } else {
    clientConfig.service = { ...DEFAULT_WEBHOOK_SERVICE, ...options.service }
  }
  if (options.caBundlePem) {
    clientConfig.caBundle = Buffer.from(options.caBundlePem, 'utf8').toString('base64')
  } else if (options.mode === 'service') {
    annotations['cert-manager.io/inject-ca-from'] = options.certManagerCertificate ?? DEFAULT_CERT_MANAGER_CERTIFICATE
  }

  const metadata: ValidatingWebhookConfiguration['metadata'] = {
    name: options.name ?? DEFAULT_WEBHOOK_CONFIGURATION_NAME,
    labels: { 'app.kubernetes.io/name': 'crd-migrator', 'app.kubernetes.io/component': 'storage-freeze-webhook' },
  }
  if (Object.keys(annotations).length > 0) metadata.annotations = annotations

  function entry(freezeAllowed: boolean): ValidatingWebhook {
    const allowed = freezeAllowedExpression()
    return {
      name: freezeAllowed ? WEBHOOK_RBAC_NAME : WEBHOOK_NAME,
      admissionReviewVersions: ['v1'],
      sideEffects: 'None',
      failurePolicy: 'Fail',
      matchPolicy: 'Equivalent',
      timeoutSeconds: options.timeoutSeconds ?? 5,
      clientConfig: freezeAllowed ? withSuffix(clientConfig, FREEZE_ALLOWED_SUFFIX) : clientConfig,
      rules: [
        {
          apiGroups: ['apiextensions.k8s.io'],
          apiVersions: ['v1'],
          operations: ['CREATE', 'UPDATE', 'DELETE'],
          resources: ['customresourcedefinitions'],
          scope: 'Cluster',
        },
        {
          apiGroups: ['apiextensions.k8s.io'],
          apiVersions: ['v1'],
          operations: ['UPDATE'],
          resources: ['customresourcedefinitions/status'],
          scope: 'Cluster',
        },
      ],
      matchConditions: [
        {
          name: 'migration-state-involved',
          expression: migrationStateMatchExpression(annotationKey, options.builtinMigratorUsers ?? DEFAULT_BUILTIN_MIGRATOR_USERS),
        },
        ...(notMigrator ? [{ name: 'not-the-migrator', expression: notMigrator }] : []),
        freezeAllowed
          ? { name: 'freeze-allowed-by-rbac', expression: allowed }
          : { name: 'freeze-not-allowed-by-rbac', expression: `!${allowed}` },
      ],
    }
  }

  return {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingWebhookConfiguration',
    metadata,
    webhooks: [entry(false), entry(true)],
  }
}

export function renderWebhookConfigurationYaml(options: WebhookConfigurationOptions): string {
  return stringify(renderWebhookConfiguration(options), { lineWidth: 0 })
}

/** The same client configuration with `suffix` added to its URL's or its service's path. */
function withSuffix(config: WebhookClientConfig, suffix: string): WebhookClientConfig {
  const out: WebhookClientConfig = { ...config }
  if (config.url !== undefined) {
    const url = new URL(config.url)
    url.pathname = url.pathname.replace(/\/$/, '') + suffix
    out.url = url.href
  }
  if (config.service) out.service = { ...config.service, path: config.service.path.replace(/\/$/, '') + suffix }
  return out
}
