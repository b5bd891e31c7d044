/**
 * Who counts as the migrator. An x509 certificate or OIDC token can carry the name
 * `system:serviceaccount:<ns>:<name>` too, so a ServiceAccount name counts only with a real
 * token's extra `authentication.kubernetes.io/credential-id` = `JTI=...` (x509 carries
 * `X509SHA256=`; OIDC may not map into kubernetes.io). Shared by the webhook and its CEL.
 */
const SERVICE_ACCOUNT_USER_PREFIX = 'system:serviceaccount:'
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
function hasServiceAccountCredential(user: UserIdentity): boolean {
  const ids = user.extra?.[CREDENTIAL_ID_EXTRA]
  return Array.isArray(ids) && ids.some((id) => typeof id === 'string' && id.startsWith(SERVICE_ACCOUNT_CREDENTIAL_PREFIX))
}

/** A user listed in `users` by name; ServiceAccount names also need the token's proof. */
export function isListedUser(user: UserIdentity, users: readonly string[]): boolean {
  if (!users.includes(user.username)) return false
  return !isServiceAccountUsername(user.username) || hasServiceAccountCredential(user)
}

/**
 * The custom verb `freeze` on a CRD, asked of RBAC by the webhook's matchConditions: lets a user besides the
 * migrator set, change and lift the freeze (docs/webhook.md#who-may-freeze-rbac).
 */
export const FREEZE_PERMISSION = Object.freeze({
  verb: 'freeze',
  group: 'apiextensions.k8s.io',
  resource: 'customresourcedefinitions',
})
