/**
 * The decisions behind the connection and refusal errors, as tables: what RBAC sees in a
 * request (src/kube/request-info.ts), how a socket or TLS failure is coded
 * (src/kube/connection-errors.ts) and what is retried (src/kube/api-errors.ts). With real
 * sockets and the real API server: test/integration/kube-errors.test.ts.
 */
import t from 'tap'
import { errorCode } from '../../src/errors.js'
import { isRetryable, KubeApiError } from '../../src/kube/api-errors.js'
import { connectionErrorCode, explainConnectionError, KubeUnreachableError } from '../../src/kube/connection-errors.js'
import type { KubeCluster } from '../../src/kube/kubeconfig.js'
import { describeAttributes, requestAttributes } from '../../src/kube/request-info.js'

t.test('request attributes: verb, group, resource, subresource, namespace, name (kube-apiserver RequestInfo)', async (t) => {
  const cases: [string, string, Record<string, string | number | boolean> | undefined, string][] = [
    [
      'GET',
      '/apis/apiextensions.k8s.io/v1/customresourcedefinitions',
      undefined,
      'verb "list" on "customresourcedefinitions" in API group "apiextensions.k8s.io", cluster-wide',
    ],
    [
      'GET',
      '/apis/apiextensions.k8s.io/v1/customresourcedefinitions',
      { watch: 1 },
      'verb "watch" on "customresourcedefinitions" in API group "apiextensions.k8s.io", cluster-wide',
    ],
    [
      'GET',
      '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com',
      undefined,
      'verb "get" on "customresourcedefinitions" in API group "apiextensions.k8s.io" (name "widgets.example.com"), cluster-wide',
    ],
    [
      'PATCH',
      '/apis/example.com/v1/namespaces/ns/widgets/w1/status',
      undefined,
      'verb "patch" on "widgets/status" in API group "example.com" (name "w1"), in namespace "ns"',
    ],
    ['POST', '/api/v1/namespaces/ns/events', undefined, 'verb "create" on "events" in API group "", in namespace "ns"'],
    ['PUT', '/api/v1/namespaces/ns/secrets/s', undefined, 'verb "update" on "secrets" in API group "" (name "s"), in namespace "ns"'],
    ['DELETE', '/api/v1/namespaces/ns/pods', undefined, 'verb "deletecollection" on "pods" in API group "", in namespace "ns"'],
    ['DELETE', '/api/v1/namespaces/ns', undefined, 'verb "delete" on "namespaces" in API group "" (name "ns"), cluster-wide'],
    [
      'PUT',
      '/api/v1/namespaces/ns/finalize',
      undefined,
      'verb "update" on "namespaces/finalize" in API group "" (name "ns"), cluster-wide',
    ],
    ['GET', '/api/v1/namespaces', undefined, 'verb "list" on "namespaces" in API group "", cluster-wide'],
    ['GET', '/version', undefined, 'verb "get" on the non-resource URL "/version"'],
    ['GET', '/apis/apps', undefined, 'verb "get" on the non-resource URL "/apis/apps"'],
  ]
  for (const [method, path, query, described] of cases) {
    t.equal(describeAttributes(requestAttributes(method, path, query)), described, `${method} ${path}`)
  }
})

t.test('401 and 403 have codes of their own, and say who and what', async (t) => {
  const who = { server: 'https://api:6443', context: 'ctx', user: 'me', origin: 'kubeconfig /k' }
  const unauthorized = new KubeApiError(401, 'GET', '/api/v1/namespaces', { kind: 'Status', message: 'Unauthorized' }, undefined, who)
  t.equal(errorCode(unauthorized), 'CRDM_UNAUTHORIZED')
  t.match(
    unauthorized.message,
    /^GET \/api\/v1\/namespaces: 401 Unauthorized — the API server at https:\/\/api:6443 does not accept the credentials of user "me" of context "ctx" \(kubeconfig \/k\)/,
  )
  const forbidden = new KubeApiError(403, 'GET', '/api/v1/namespaces', { kind: 'Status', message: 'forbidden' }, undefined, {
    ...who,
    attributes: requestAttributes('GET', '/api/v1/namespaces'),
  })
  t.equal(errorCode(forbidden), 'CRDM_FORBIDDEN')
  t.match(
    forbidden.message,
    /403 forbidden — user "me" of context "ctx" may not use verb "list" on "namespaces" in API group "", cluster-wide/,
  )
  t.equal(errorCode(new KubeApiError(403, 'GET', '/x', 'no', undefined)), 'CRDM_FORBIDDEN', 'without a requester too')
  // Issue 43: an admission webhook's refusal of a write is not RBAC's; RBAC's names the resource (details.kind).
  const patchPath = '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com'
  const asPatch = { ...who, attributes: requestAttributes('PATCH', patchPath) }
  const byWebhook = new KubeApiError(
    403,
    'PATCH',
    patchPath,
    { kind: 'Status', status: 'Failure', code: 403, message: 'admission webhook "storage-freeze.crd-migrator.io" denied the request: no' },
    undefined,
    asPatch,
  )
  t.match(byWebhook.message, /denied the request: no — refused by admission control \(a webhook or policy\), not by RBAC/)
  t.notMatch(byWebhook.message, /grant it with RBAC/, 'not blamed on RBAC')
  const byRbac = new KubeApiError(
    403,
    'PATCH',
    patchPath,
    {
      kind: 'Status',
      reason: 'Forbidden',
      message: 'forbidden',
      details: { name: 'widgets.example.com', group: 'apiextensions.k8s.io', kind: 'customresourcedefinitions' },
    },
    undefined,
    asPatch,
  )
  t.match(
    byRbac.message,
    /may not use verb "patch" on "customresourcedefinitions".*: grant it with RBAC$/,
    "RBAC's own refusal still says so",
  )
  t.equal(errorCode(new KubeApiError(500, 'GET', '/x', 'boom', undefined)), 'CRDM_KUBE_API')
  t.notOk(isRetryable(forbidden), 'a 403 is never retried')
  t.notOk(isRetryable(unauthorized))
})

t.test('connection failures: coded by errno or TLS code, retried only once the server has answered', async (t) => {
  const cluster: KubeCluster = { name: 'c', server: new URL('https://api.example.com:6443'), insecureSkipTlsVerify: false }
  const server = cluster.server
  const sys = (code: string) => Object.assign(new Error(`connect ${code}`), { code })
  const cases: [string, unknown, boolean, string, string | undefined, boolean | undefined][] = [
    ['refused, never reached', sys('ECONNREFUSED'), false, 'CRDM_UNREACHABLE', 'ECONNREFUSED', false],
    ['refused after answers (a restart)', sys('ECONNREFUSED'), true, 'CRDM_UNREACHABLE', 'ECONNREFUSED', true],
    ['DNS', sys('ENOTFOUND'), false, 'CRDM_UNREACHABLE', 'ENOTFOUND', false],
    ['DNS, try later', sys('EAI_AGAIN'), false, 'CRDM_UNREACHABLE', 'EAI_AGAIN', false],
    ['connect timeout', sys('ETIMEDOUT'), false, 'CRDM_UNREACHABLE', 'ETIMEDOUT', false],
    ['request timeout', Object.assign(new Error('timed out'), { name: 'TimeoutError' }), true, 'CRDM_UNREACHABLE', 'ETIMEDOUT', true],
    ['unknown authority', sys('UNABLE_TO_VERIFY_LEAF_SIGNATURE'), false, 'CRDM_TLS', 'UNABLE_TO_VERIFY_LEAF_SIGNATURE', false],
    ['self-signed', sys('DEPTH_ZERO_SELF_SIGNED_CERT'), true, 'CRDM_TLS', 'DEPTH_ZERO_SELF_SIGNED_CERT', false],
    ['expired', sys('CERT_HAS_EXPIRED'), true, 'CRDM_TLS', 'CERT_HAS_EXPIRED', false],
    ['hostname mismatch', sys('ERR_TLS_CERT_ALTNAME_INVALID'), false, 'CRDM_TLS', 'ERR_TLS_CERT_ALTNAME_INVALID', false],
    ['not TLS at all', sys('ERR_SSL_WRONG_VERSION_NUMBER'), false, 'CRDM_TLS', 'ERR_SSL_WRONG_VERSION_NUMBER', false],
    ['anything else', new TypeError('x'), false, 'CRDM_INTERNAL', undefined, false],
  ]
  for (const [what, err, reached, code, detail, retryable] of cases) {
    const explained = explainConnectionError(err, server, cluster, reached)
    t.equal(errorCode(explained), code, `${what}: code`)
    t.equal(connectionErrorCode(explained), detail, `${what}: errno or TLS code`)
    t.equal(isRetryable(explained), retryable, `${what}: retried by the migration`)
  }
  const refused = explainConnectionError(sys('ECONNREFUSED'), server, cluster, false, 3) as KubeUnreachableError
  t.equal(
    refused.message,
    'cannot reach the API server at https://api.example.com:6443: ECONNREFUSED, connection refused: nothing listens there (3 attempts)',
  )
  t.equal(
    (explainConnectionError(sys('ECONNREFUSED'), server, cluster, true) as Error).message,
    'lost the API server at https://api.example.com:6443: ECONNREFUSED, connection refused: nothing listens there',
    'after it has answered: an outage, retried by the migration',
  )
  t.match(
    (explainConnectionError(sys('CERT_HAS_EXPIRED'), server, cluster, false) as Error).message,
    /^TLS: the certificate of the API server at api\.example\.com:6443 is not valid now: CERT_HAS_EXPIRED; renew/,
  )
  t.match(
    (explainConnectionError(sys('ERR_TLS_CERT_ALTNAME_INVALID'), server, cluster, false) as Error).message,
    /does not cover "api\.example\.com" \(hostname mismatch\); set tls-server-name of cluster "c"/,
  )
})
