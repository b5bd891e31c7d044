/** RBAC for the narrow-permission users of the freeze tests, through the real API server. */
import t from 'tap'
import type { ControlPlane } from '../../dev/controlplane/controlplane.js'
import { until } from './until.js'

const RBAC = '/apis/rbac.authorization.k8s.io/v1'

/** A ClusterRole `name` with `rules`, bound to `subjects`; both deleted when the test file ends. */
export async function grantClusterRole(cp: ControlPlane, name: string, rules: unknown[], subjects: unknown[]): Promise<void> {
  for (const [path, body] of [
    [`${RBAC}/clusterroles`, { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name }, rules }],
    [
      `${RBAC}/clusterrolebindings`,
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRoleBinding',
        metadata: { name },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name },
        subjects,
      },
    ],
  ] as const) {
    const res = await cp.apiRequest(path, { method: 'POST', body })
    if (res.status !== 201) throw new Error(`POST ${path}: ${res.status} ${res.body}`)
  }
  t.teardown(async () => {
    await cp.apiRequest(`${RBAC}/clusterrolebindings/${name}`, { method: 'DELETE' })
    await cp.apiRequest(`${RBAC}/clusterroles/${name}`, { method: 'DELETE' })
  })
  const first = (rules as GrantedRule[])[0]
  if (first) for (const subject of subjects as Subject[]) await untilGranted(cp, first, subject)
}

type Subject = { kind: string; name: string; namespace?: string }
type GrantedRule = { apiGroups?: string[]; resources?: string[]; resourceNames?: string[]; verbs: string[] }

/**
 * Waits until the API server's RBAC authorizer lets `subject` do the first thing `rule`
 * grants. The authorizer answers from an informer cache, so a binding takes effect a
 * moment after its POST returns: a request made at once may still be refused (a clean-clone
 * run saw "alice cannot create customresourcedefinitions" right after her binding).
 */
export async function untilGranted(cp: ControlPlane, rule: GrantedRule, subject: Subject): Promise<void> {
  const who =
    subject.kind === 'Group'
      ? { user: 'rbac-probe', groups: [subject.name, 'system:authenticated'] }
      : subject.kind === 'ServiceAccount'
        ? { user: `system:serviceaccount:${subject.namespace}:${subject.name}`, groups: ['system:authenticated'] }
        : { user: subject.name, groups: ['system:authenticated'] }
  const resourceAttributes = {
    group: rule.apiGroups?.[0] ?? '',
    resource: rule.resources?.[0] ?? '',
    verb: rule.verbs[0],
    ...(rule.resourceNames ? { name: rule.resourceNames[0] } : {}),
  }
  await until(
    `RBAC to grant ${subject.kind} ${subject.name} ${JSON.stringify(resourceAttributes)}`,
    30_000,
    () => accessAllowed(cp, who, resourceAttributes),
    (allowed) => allowed,
    { everyMs: 100 },
  )
}

/** The API server's authorizer's answer (a SubjectAccessReview): may `who` do `resourceAttributes`? */
export async function accessAllowed(
  cp: ControlPlane,
  who: { user: string; groups: string[] },
  resourceAttributes: Record<string, string | undefined>,
): Promise<boolean> {
  const res = await cp.apiRequest('/apis/authorization.k8s.io/v1/subjectaccessreviews', {
    method: 'POST',
    body: { apiVersion: 'authorization.k8s.io/v1', kind: 'SubjectAccessReview', spec: { ...who, resourceAttributes } },
  })
  if (res.status !== 201) throw new Error(`SubjectAccessReview: HTTP ${res.status} ${res.body}`)
  return (res.json as { status: { allowed: boolean } }).status.allowed
}
