/**
 * cert-manager on the local control plane (dev/controlplane/cert-manager.ts): its real
 * controllers and cainjector, built from the cert-manager Go module, on a real
 * kube-apiserver + etcd. The chain the chart relies on: a SelfSigned ClusterIssuer signs a
 * CA Certificate, a CA Issuer over that CA's Secret signs a serving Certificate, and the
 * cainjector copies the CA into a ValidatingWebhookConfiguration annotated
 * cert-manager.io/inject-ca-from. A Certificate whose renewBefore is almost its duration is
 * renewed by cert-manager itself. A private control plane: a cainjector on the shared one
 * would inject into other files' webhook configurations.
 */
import { createPrivateKey, X509Certificate } from 'node:crypto'
import t from 'tap'
import { startCertManager, type CertManager } from '../../dev/controlplane/cert-manager.js'
import { ensureTools } from '../../dev/controlplane/tools.js'
import { startPrivateControlPlane, uniqueName } from '../helpers/controlplane.js'
import { until } from '../helpers/until.js'

const cp = await startPrivateControlPlane()
// A cold build of cert-manager takes minutes; then the file's own timeout applies again.
t.setTimeout(30 * 60 * 1000)
await ensureTools()
t.setTimeout(Number(process.env['TAP_TIMEOUT'] ?? '600') * 1000)
const cm: CertManager = await startCertManager(cp)
t.teardown(() => cm.stop())

const ns = uniqueName('cm')
const CM = '/apis/cert-manager.io/v1'
const ISSUED_WITHIN_MS = 60_000

interface Condition {
  type: string
  status: string
  reason?: string
  message?: string
}
interface CertificateStatus {
  conditions?: Condition[]
  revision?: number
  notAfter?: string
  renewalTime?: string
}

async function create(path: string, body: object): Promise<void> {
  const res = await cp.apiRequest(path, { method: 'POST', body })
  if (res.status !== 201) throw new Error(`POST ${path}: HTTP ${res.status} ${res.body.slice(0, 300)}`)
}

async function getJson<T>(path: string): Promise<T> {
  const res = await cp.apiRequest(path)
  if (res.status !== 200) throw new Error(`GET ${path}: HTTP ${res.status} ${res.body.slice(0, 300)}`)
  return res.json as T
}

const certificateStatus = async (name: string) =>
  (await getJson<{ status?: CertificateStatus }>(`${CM}/namespaces/${ns}/certificates/${name}`)).status ?? {}
const isReady = (s: { conditions?: Condition[] }) => s.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true

async function secretData(name: string): Promise<Record<string, string>> {
  const s = await getJson<{ data?: Record<string, string> }>(`/api/v1/namespaces/${ns}/secrets/${name}`)
  return Object.fromEntries(Object.entries(s.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]))
}

function certificate(name: string, spec: object): object {
  return { apiVersion: 'cert-manager.io/v1', kind: 'Certificate', metadata: { name, namespace: ns }, spec }
}

const ecdsa = { algorithm: 'ECDSA', size: 256 }
const selfSignedName = `${ns}-selfsigned`

t.before(async () => {
  await create('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } })
})

t.test('cert-manager runs: its CRDs are installed and it answers /readyz', async (t) => {
  t.ok(cm.running, 'the process runs')
  for (const crd of [
    'certificates.cert-manager.io',
    'certificaterequests.cert-manager.io',
    'issuers.cert-manager.io',
    'clusterissuers.cert-manager.io',
  ]) {
    t.ok(cm.crds.includes(crd), `${crd} installed`)
  }
  t.comment(`ready in ${cm.readyMs} ms (binary ${cm.binary})`)
})

t.test('SelfSigned ClusterIssuer -> CA Certificate -> CA Issuer -> serving Certificate', async (t) => {
  await create(`${CM}/clusterissuers`, {
    apiVersion: 'cert-manager.io/v1',
    kind: 'ClusterIssuer',
    metadata: { name: selfSignedName },
    spec: { selfSigned: {} },
  })
  await until(
    'the SelfSigned ClusterIssuer Ready',
    ISSUED_WITHIN_MS,
    async () => (await getJson<{ status?: CertificateStatus }>(`${CM}/clusterissuers/${selfSignedName}`)).status ?? {},
    isReady,
  )
  await create(
    `${CM}/namespaces/${ns}/certificates`,
    certificate('root-ca', {
      isCA: true,
      commonName: 'crd-migrator test CA',
      secretName: 'root-ca',
      privateKey: ecdsa,
      issuerRef: { group: 'cert-manager.io', kind: 'ClusterIssuer', name: selfSignedName },
    }),
  )
  await until('the CA Certificate Ready', ISSUED_WITHIN_MS, () => certificateStatus('root-ca'), isReady)
  await create(`${CM}/namespaces/${ns}/issuers`, {
    apiVersion: 'cert-manager.io/v1',
    kind: 'Issuer',
    metadata: { name: 'ca', namespace: ns },
    spec: { ca: { secretName: 'root-ca' } },
  })
  await until(
    'the CA Issuer Ready',
    ISSUED_WITHIN_MS,
    async () => (await getJson<{ status?: CertificateStatus }>(`${CM}/namespaces/${ns}/issuers/ca`)).status ?? {},
    isReady,
  )
  const dnsNames = [`webhook.${ns}.svc`, `webhook.${ns}.svc.cluster.local`]
  await create(
    `${CM}/namespaces/${ns}/certificates`,
    certificate('serving', {
      secretName: 'serving-tls',
      dnsNames,
      privateKey: ecdsa,
      usages: ['server auth', 'digital signature'],
      issuerRef: { group: 'cert-manager.io', kind: 'Issuer', name: 'ca' },
    }),
  )
  await until('the serving Certificate Ready', ISSUED_WITHIN_MS, () => certificateStatus('serving'), isReady)

  const root = await secretData('root-ca')
  const serving = await secretData('serving-tls')
  t.ok(serving['tls.crt'] && serving['tls.key'] && serving['ca.crt'], 'the serving Secret has tls.crt, tls.key and ca.crt')
  const ca = new X509Certificate(root['tls.crt']!)
  t.ok(ca.ca, 'the CA certificate is a CA')
  t.ok(ca.checkIssued(ca) && ca.verify(ca.publicKey), 'the CA certificate is self-signed')
  t.match(ca.subject, /CN=crd-migrator test CA/)
  const caFromServing = new X509Certificate(serving['ca.crt']!)
  t.equal(caFromServing.fingerprint256, ca.fingerprint256, "the serving Secret's ca.crt is the CA")
  const leaf = new X509Certificate(serving['tls.crt']!)
  t.notOk(leaf.ca, 'the serving certificate is no CA')
  t.ok(leaf.checkIssued(ca), 'the serving certificate names the CA as issuer')
  t.ok(leaf.verify(ca.publicKey), "the serving certificate carries the CA's signature")
  t.ok(leaf.checkPrivateKey(createPrivateKey(serving['tls.key']!)), 'tls.key is the serving certificate key')
  t.same(leaf.subjectAltName?.split(', ').sort(), dnsNames.map((d) => `DNS:${d}`).sort(), 'its DNS names')
  for (const d of dnsNames) t.equal(leaf.checkHost(d), d, `valid for ${d}`)
  const now = Date.now()
  t.ok(leaf.validFromDate.getTime() <= now + 60_000 && leaf.validToDate.getTime() > now, 'valid now')
  t.ok(leaf.keyUsage?.includes('1.3.6.1.5.5.7.3.1'), 'extended key usage: server auth')
})

t.test('the cainjector injects the CA into an annotated ValidatingWebhookConfiguration', async (t) => {
  const name = `${ns}-webhook`
  await create('/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations', {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingWebhookConfiguration',
    metadata: { name, annotations: { 'cert-manager.io/inject-ca-from': `${ns}/serving` } },
    webhooks: [
      {
        name: 'validate.crd-migrator.test',
        clientConfig: { service: { namespace: ns, name: 'webhook', path: '/validate', port: 443 } },
        // Nothing real matches: the configuration is only a target of the injection.
        rules: [{ operations: ['CREATE'], apiGroups: ['crd-migrator.test'], apiVersions: ['v1'], resources: ['nothings'] }],
        admissionReviewVersions: ['v1'],
        sideEffects: 'None',
        failurePolicy: 'Ignore',
      },
    ],
  })
  const caCrt = (await secretData('serving-tls'))['ca.crt']!
  const vwc = await until(
    'a caBundle in the ValidatingWebhookConfiguration',
    ISSUED_WITHIN_MS,
    () =>
      getJson<{ webhooks: { clientConfig: { caBundle?: string } }[] }>(
        `/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/${name}`,
      ),
    (v) => Boolean(v.webhooks[0]?.clientConfig.caBundle),
  )
  const injected = Buffer.from(vwc.webhooks[0]!.clientConfig.caBundle!, 'base64').toString('utf8')
  t.equal(
    new X509Certificate(injected).fingerprint256,
    new X509Certificate(caCrt).fingerprint256,
    "the caBundle is the serving Certificate's CA",
  )
})

t.test('a Certificate is renewed before it expires: a new serial from the same CA', async (t) => {
  // 1h certificates renewed 15 s after issuance (renewBefore: 59m45s; no webhook here
  // to refuse a renewBefore this close to the duration).
  await create(
    `${CM}/namespaces/${ns}/certificates`,
    certificate('short', {
      secretName: 'short-tls',
      dnsNames: [`short.${ns}.svc`],
      privateKey: ecdsa,
      duration: '1h',
      renewBefore: '59m45s',
      issuerRef: { group: 'cert-manager.io', kind: 'Issuer', name: 'ca' },
    }),
  )
  const first = await until('the short Certificate Ready', ISSUED_WITHIN_MS, () => certificateStatus('short'), isReady)
  const firstCert = new X509Certificate((await secretData('short-tls'))['tls.crt']!)
  t.ok(first.renewalTime, `a renewal time: ${first.renewalTime}`)
  const renewed = await until(
    'a second revision of the short Certificate',
    ISSUED_WITHIN_MS,
    () => certificateStatus('short'),
    (s) => (s.revision ?? 0) > (first.revision ?? 1) && isReady(s),
    { everyMs: 500 },
  )
  const secondCert = new X509Certificate((await secretData('short-tls'))['tls.crt']!)
  t.not(secondCert.serialNumber, firstCert.serialNumber, `a new serial (revision ${renewed.revision})`)
  t.ok(secondCert.validFromDate.getTime() >= firstCert.validFromDate.getTime(), 'issued no earlier than the first')
  const ca = new X509Certificate((await secretData('root-ca'))['tls.crt']!)
  t.ok(secondCert.checkIssued(ca) && secondCert.verify(ca.publicKey), 'signed by the same CA')
})

t.test('stop() ends the process', async (t) => {
  await cm.stop()
  t.notOk(cm.running, 'cert-manager no longer runs')
})
