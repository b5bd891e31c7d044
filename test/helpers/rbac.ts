/** RBAC for the narrow-permission users of the freeze tests, through the real API server. */
import t from 'tap'
import type { ControlPlane } from '../../dev/controlplane/controlplane.js'

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
}
