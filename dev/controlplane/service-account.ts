/**
 * ServiceAccount identities on the local control plane: a ServiceAccount (created when
 * missing), optionally bound to a ClusterRole, and a kubeconfig with a token for it from
 * the TokenRequest API (the control plane signs them with its service-account key).
 *
 * Why not a client certificate: API Priority and Fairness classifies requests by who sent
 * them, and a chart's FlowSchema names its ServiceAccount. A client certificate in group
 * system:masters (the admin kubeconfig) is exempt from APF altogether, so whatever should
 * be measured under APF must run as a ServiceAccount (or another non-exempt user).
 */
import { writeFile } from 'node:fs/promises'
import { stringify } from 'yaml'
import type { ControlPlane } from './controlplane.js'

export interface ServiceAccountIdentity {
  namespace: string
  name: string
  /** `system:serviceaccount:<namespace>:<name>` */
  username: string
  token: string
  kubeconfigPath: string
}

export interface ServiceAccountOptions {
  /** Bind this ClusterRole (e.g. cluster-admin) to the ServiceAccount, cluster-wide. */
  clusterRole?: string
  /** Token lifetime; default 24 h (a long bench must not outlive it). */
  expirationSeconds?: number
}

async function createUnlessExists(cp: ControlPlane, path: string, body: unknown): Promise<void> {
  const res = await cp.apiRequest(path, { method: 'POST', body })
  if (res.status !== 201 && res.status !== 409) throw new Error(`POST ${path}: HTTP ${res.status} ${res.body.slice(0, 300)}`)
}

/**
 * A ServiceAccount `namespace/name` with a fresh token, and `kubeconfigPath` (written, mode
 * 0600) talking to the control plane's first API server as it.
 */
export async function serviceAccountIdentity(
  cp: ControlPlane,
  namespace: string,
  name: string,
  kubeconfigPath: string,
  options: ServiceAccountOptions = {},
): Promise<ServiceAccountIdentity> {
  await createUnlessExists(cp, '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace } })
  await createUnlessExists(cp, `/api/v1/namespaces/${namespace}/serviceaccounts`, {
    apiVersion: 'v1',
    kind: 'ServiceAccount',
    metadata: { name },
  })
  const username = `system:serviceaccount:${namespace}:${name}`
  if (options.clusterRole) {
    await createUnlessExists(cp, '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: `${namespace}-${name}-${options.clusterRole}` },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: options.clusterRole },
      subjects: [{ kind: 'ServiceAccount', namespace, name }],
    })
  }
  const path = `/api/v1/namespaces/${namespace}/serviceaccounts/${name}/token`
  const res = await cp.apiRequest(path, {
    method: 'POST',
    body: {
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'TokenRequest',
      spec: { expirationSeconds: options.expirationSeconds ?? 86_400 },
    },
  })
  const token = (res.json as { status?: { token?: string } } | undefined)?.status?.token
  if (res.status !== 201 || !token) throw new Error(`POST ${path}: HTTP ${res.status} ${res.body.slice(0, 300)}`)
  const context = `${namespace}-${name}`
  await writeFile(
    kubeconfigPath,
    stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: context, cluster: { server: cp.server, 'certificate-authority-data': Buffer.from(cp.caPem).toString('base64') } }],
      users: [{ name: context, user: { token } }],
      contexts: [{ name: context, context: { cluster: context, user: context } }],
      'current-context': context,
    }),
    { mode: 0o600 },
  )
  return { namespace, name, username, token, kubeconfigPath }
}
