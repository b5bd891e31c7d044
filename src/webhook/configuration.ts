/**
 * The storage freeze's ValidatingWebhookConfiguration, as data. webhook-config/
 * validating-webhook.yaml is the 'service' render (a test keeps them equal); local dev
 * renders 'url', trusted through the development CA. What it selects and why, the two entries
 * and RBAC's `freeze`: docs/webhook.md (#the-webhook, #who-may-freeze-rbac). Besides:
 * - CREATE is judged because it could carry forged state. matchPolicy: Equivalent, so other
 *   served versions reach us converted to v1.
 * - The matchConditions also mean a down webhook never stalls built-in migrations or whole-CRD
 *   installers. `object` is null on DELETE and `oldObject` on CREATE: guarded with `!= null`,
 *   since a CEL error under failurePolicy: Fail rejects the request.
 * - failurePolicy: Fail: a freeze that lets changes through when the webhook is down is none.
 *   timeoutSeconds: 5: a decision takes microseconds; a slow answer means a sick webhook.
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
/** The entry for requesters RBAC allows to freeze the CRD (docs/webhook.md#who-may-freeze-rbac). */
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
  name?: string
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

interface WebhookClientConfig {
  url?: string
  service?: { namespace: string; name: string; path: string; port: number }
  caBundle?: string
}

/** The request-selecting matchCondition `migration-state-involved` (docs/webhook.md#the-webhook). */
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

/** A CEL string literal: JSON's escapes are CEL's too, and escaping <, >, &, U+2028/9 as Go does matches Helm's `toJson`, so the chart renders the same. */
export function celString(value: string): string {
  return JSON.stringify(value).replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}

const celList = (values: readonly string[]) => `[${values.map(celString).join(',')}]`

/** True unless the requester is a migrator identity; empty lists are left out. */
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

export function freezeAllowedExpression(): string {
  const { group, resource, verb } = FREEZE_PERMISSION
  return `authorizer.group(${celString(group)}).resource(${celString(resource)}).name(request.name).check(${celString(verb)}).allowed()`
}

/** The admissionregistration.k8s.io/v1 ValidatingWebhookConfiguration (see the header). */
export function renderWebhookConfiguration(options: WebhookConfigurationOptions) {
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

  const metadata = {
    name: options.name ?? DEFAULT_WEBHOOK_CONFIGURATION_NAME,
    labels: { 'app.kubernetes.io/name': 'crd-migrator', 'app.kubernetes.io/component': 'storage-freeze-webhook' },
    ...(Object.keys(annotations).length > 0 ? { annotations } : {}),
  }

  function entry(freezeAllowed: boolean) {
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
        crdRule(['CREATE', 'UPDATE', 'DELETE'], 'customresourcedefinitions'),
        crdRule(['UPDATE'], 'customresourcedefinitions/status'),
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

function crdRule(operations: string[], resource: string) {
  return { apiGroups: ['apiextensions.k8s.io'], apiVersions: ['v1'], operations, resources: [resource], scope: 'Cluster' }
}

export function renderWebhookConfigurationYaml(options: WebhookConfigurationOptions): string {
  return stringify(renderWebhookConfiguration(options), { lineWidth: 0 })
}

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
