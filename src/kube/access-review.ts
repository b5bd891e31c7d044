/**
 * May this process list and patch every object of a resource (and patch the CRD it would
 * freeze)? Asked before freezing, since a StorageVersionMigration can name a resource our RBAC
 * does not cover: one SelfSubjectAccessReview per verb (open to every user via system:basic-user).
 * Without them, a list of one object stands in for `list` and `patch` stays unverified.
 */
import { isForbidden, isNotFound, unlessForbidden, unlessNotFound } from './api-errors.js'
import type { KubeRequests } from './http.js'
import { collectionPath } from './paths.js'

const SSAR_PATH = '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews'

/** `verb` on every object of `group`/`resource` (`subresource`) in all namespaces; with `name`, on that one cluster-scoped object. */
export interface AccessCheck {
  verb: 'list' | 'patch'
  group: string
  resource: string
  subresource?: 'status'
  name?: string
}

const CRD_GROUP = 'apiextensions.k8s.io'
const CRDS = 'customresourcedefinitions'

/** The API server's answer to one check: allowed, denied, or unknown (could not be asked). */
export interface AccessAnswer {
  check: AccessCheck
  allowed: boolean | undefined
  /** The authorizer's reason, when it gave one. */
  reason?: string
}

export type AccessVerdict =
  { allowed: true; unverified: AccessCheck[] } | { allowed: false; denied: AccessCheck[]; reason: string; unverified: AccessCheck[] }

/** What a frozen run writes on its CRD: the freeze, heartbeat and unfreeze; status.storedVersions when `storedVersions`. */
export interface CrdWrites {
  name: string
  storedVersions: boolean
}

/** With `crd`, patching the CRD too: a run that may freeze it but not lift it leaves it frozen against everyone. */
export function checksFor(
  resource: { group: string; plural: string },
  options: { statusSubresource?: boolean; crd?: CrdWrites } = {},
): AccessCheck[] {
  const base = { group: resource.group, resource: resource.plural }
  const crd = options.crd && { group: CRD_GROUP, resource: CRDS, name: options.crd.name }
  return [
    { verb: 'list', ...base },
    { verb: 'patch', ...base },
    ...(options.statusSubresource ? [{ verb: 'patch' as const, ...base, subresource: 'status' as const }] : []),
    ...(crd ? [{ verb: 'patch' as const, ...crd }] : []),
    ...(crd && options.crd?.storedVersions ? [{ verb: 'patch' as const, ...crd, subresource: 'status' as const }] : []),
  ]
}

/** `patch widgets.example.com/status`, `list secrets` (core group), `patch customresourcedefinitions.apiextensions.k8s.io/status "widgets.example.com"`. */
export function describeCheck(c: AccessCheck): string {
  return `${c.verb} ${c.resource}${c.group ? `.${c.group}` : ''}${c.subresource ? `/${c.subresource}` : ''}${c.name ? ` "${c.name}"` : ''}`
}

/** Allowed only when no check is denied; an unknown answer is not a denial (said in `unverified`). */
export function accessVerdict(answers: readonly AccessAnswer[]): AccessVerdict {
  const denied = answers.filter((a) => a.allowed === false)
  const unverified = answers.filter((a) => a.allowed === undefined).map((a) => a.check)
  if (denied.length === 0) return { allowed: true, unverified }
  const reasons = [...new Set(denied.map((a) => a.reason).filter((r): r is string => !!r))]
  const everywhere = denied.filter((a) => a.check.name === undefined).map((a) => describeCheck(a.check))
  const named = denied.filter((a) => a.check.name !== undefined).map((a) => describeCheck(a.check))
  const what = [...(everywhere.length ? [`${everywhere.join(', ')} in all namespaces`] : []), ...named].join(', ')
  const reason = `the migrator may not ${what} (RBAC)` + (reasons.length ? ` (${reasons.join('; ')})` : '')
  return { allowed: false, denied: denied.map((a) => a.check), reason, unverified }
}

interface SelfSubjectAccessReview {
  status?: { allowed?: boolean; denied?: boolean; reason?: string; evaluationError?: string }
}

/** In parallel; see the module comment for the fallback. */
export async function reviewAccess(http: KubeRequests, checks: readonly AccessCheck[], version?: string): Promise<AccessAnswer[]> {
  return Promise.all(
    checks.map(async (check): Promise<AccessAnswer> => {
      try {
        const review = await http.request<SelfSubjectAccessReview>({
          method: 'POST',
          path: SSAR_PATH,
          body: {
            apiVersion: 'authorization.k8s.io/v1',
            kind: 'SelfSubjectAccessReview',
            spec: {
              resourceAttributes: {
                verb: check.verb,
                group: check.group,
                resource: check.resource,
                ...(check.subresource ? { subresource: check.subresource } : {}),
                ...(check.name ? { name: check.name } : {}),
              },
            },
          },
        })
        const status = review.body.status ?? {}
        // allowed false with denied false is "no opinion": with no other authorizer saying yes, a denial.
        return { check, allowed: status.allowed === true, ...(status.reason ? { reason: status.reason } : {}) }
      } catch (err) {
        if (!isForbidden(err) && !isNotFound(err)) throw err
        return { check, allowed: check.verb === 'list' && version ? await mayList(http, check, version) : undefined }
      }
    }),
  )
}

/** The stand-in for `list`: one object of the resource, in all namespaces. */
async function mayList(http: KubeRequests, check: AccessCheck, version: string): Promise<boolean | undefined> {
  const path = collectionPath({ group: check.group, version, plural: check.resource })
  const listed = unlessForbidden(http.request({ method: 'GET', path, query: { limit: 1 } }))
  return unlessNotFound(listed.then((answer) => answer !== undefined))
}

export async function migrationAccess(
  http: KubeRequests,
  resource: { group: string; plural: string; version: string },
  options: { statusSubresource?: boolean; crd?: CrdWrites } = {},
): Promise<AccessVerdict> {
  return accessVerdict(await reviewAccess(http, checksFor(resource, options), resource.version))
}
