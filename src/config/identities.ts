/**
 * Who counts as the migrator. A username alone proves little for ServiceAccount names:
 * an x509 client certificate or an OIDC token can carry the name
 * `system:serviceaccount:<ns>:<name>` too. A real ServiceAccount token (TokenRequest,
 * what every pod gets) also carries the extra `authentication.kubernetes.io/credential-id`
 * with a `JTI=` value; x509 users carry `X509SHA256=` there, and structured OIDC
 * configuration may not map extras into the kubernetes.io domain. So a ServiceAccount
 * name counts as the migrator only with that proof. The webhook's decision and its
 * matchConditions (the renderer's CEL) both use these constants.
 */
export const SERVICE_ACCOUNT_USER_PREFIX = 'system:serviceaccount:'
export const CREDENTIAL_ID_EXTRA = 'authentication.kubernetes.io/credential-id'
export const SERVICE_ACCOUNT_CREDENTIAL_PREFIX = 'JTI='

export interface UserIdentity {
  username: string
  groups: readonly string[]
  extra?: Readonly<Record<string, readonly string[]>>
}

export function isServiceAccountUsername(username: string): boolean {
  return username.startsWith(SERVICE_ACCOUNT_USER_PREFIX)
}

/** Whether the request was made with a ServiceAccount token (see the header). */
export function hasServiceAccountCredential(user: UserIdentity): boolean {
  const ids = user.extra?.[CREDENTIAL_ID_EXTRA]
  return Array.isArray(ids) && ids.some((id) => typeof id === 'string' && id.startsWith(SERVICE_ACCOUNT_CREDENTIAL_PREFIX))
}

/** A user listed in `users` by name; ServiceAccount names also need the token's proof. */
export function isListedUser(user: UserIdentity, users: readonly string[]): boolean {
  if (!users.includes(user.username)) return false
  return !isServiceAccountUsername(user.username) || hasServiceAccountCredential(user)
}

/**
 * The permission that lets a user besides the migrator set, change and lift the freeze and
 * write the migrator's state (what break-glass groups may): the verb `freeze` on the CRD,
 * asked of the API server's authorizer (RBAC) by the webhook configuration's
 * matchConditions (webhook/configuration.ts). `cluster-admin` holds it through its
 * wildcard; the chart's ClusterRole `<fullname>-freeze` grants it alone (resourceNames can
 * narrow it to some CRDs). A custom verb, as `approve` on certificate signers: no request
 * uses it, only authorization checks do.
 */
export const FREEZE_PERMISSION = Object.freeze({
  verb: 'freeze',
  group: 'apiextensions.k8s.io',
  resource: 'customresourcedefinitions',
})
