/**
 * Throw-away PKI for the local control plane: one CA that signs the kube-apiserver's
 * serving certificate and every client certificate (client-cert authentication maps
 * CN -> user name, O -> groups), plus a service-account signing key pair.
 *
 * All keys are ECDSA P-256: generation takes a few milliseconds, unlike RSA.
 */
import { generateKeyPair as generateKeyPairCb, X509Certificate } from 'node:crypto'
import { promisify } from 'node:util'
import { generate } from 'selfsigned'

const generateKeyPair = promisify(generateKeyPairCb)

export interface CertKeyPair {
  certPem: string
  keyPem: string
}

export interface KeyPairPem {
  privateKeyPem: string
  publicKeyPem: string
}

const HOUR = 60 * 60 * 1000

function validity(days: number): { notBeforeDate: Date; notAfterDate: Date } {
  // Back-date a little so a certificate is valid immediately even with coarse clocks.
  const notBeforeDate = new Date(Date.now() - HOUR)
  return { notBeforeDate, notAfterDate: new Date(notBeforeDate.getTime() + days * 24 * HOUR) }
}

/**
 * selfsigned builds the subject as the string `CN=v, O=v, ...`; escape RFC 4514 specials so
 * a value such as `a,b` cannot inject another attribute.
 */
function escapeDnValue(value: string): string {
  if (value.length === 0) throw new Error('empty distinguished-name value')
  let out = value.replace(/([,+"\\<>;=])/g, '\\$1')
  if (out.startsWith('#') || out.startsWith(' ')) out = `\\${out}`
  if (out.endsWith(' ')) out = `${out.slice(0, -1)}\\ `
  return out
}

/** A self-signed CA certificate valid for ten years. */
export async function createCa(commonName = 'crd-migrator-devenv-ca'): Promise<CertKeyPair> {
  const pems = await generate([{ name: 'commonName', value: escapeDnValue(commonName) }], {
    keyType: 'ec',
    algorithm: 'sha256',
    ...validity(3650),
    extensions: [
      { name: 'basicConstraints', cA: true, critical: true },
      { name: 'keyUsage', keyCertSign: true, cRLSign: true, digitalSignature: true, critical: true },
    ],
  })
  return { certPem: pems.cert, keyPem: pems.private }
}

export interface ServingCertOptions {
  commonName?: string
  dnsNames?: string[]
  ips?: string[]
}

/** A TLS server certificate signed by `ca`. */
export async function issueServingCert(ca: CertKeyPair, opts: ServingCertOptions = {}): Promise<CertKeyPair> {
  const dnsNames = opts.dnsNames ?? ['localhost']
  const ips = opts.ips ?? ['127.0.0.1']
  const pems = await generate([{ name: 'commonName', value: escapeDnValue(opts.commonName ?? 'kube-apiserver') }], {
    keyType: 'ec',
    algorithm: 'sha256',
    ...validity(365),
    ca: { key: ca.keyPem, cert: ca.certPem },
    extensions: [
      { name: 'basicConstraints', cA: false, critical: true },
      { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
      { name: 'extKeyUsage', serverAuth: true },
      {
        name: 'subjectAltName',
        altNames: [...dnsNames.map((value) => ({ type: 2 as const, value })), ...ips.map((ip) => ({ type: 7 as const, ip }))],
      },
    ],
  })
  return { certPem: pems.cert, keyPem: pems.private }
}

/**
 * A TLS client certificate signed by `ca`. The kube-apiserver reads the user name from the
 * CN and one group from each O attribute.
 */
export async function issueClientCert(ca: CertKeyPair, user: string, groups: readonly string[] = []): Promise<CertKeyPair> {
  const attrs = [
    { name: 'commonName', value: escapeDnValue(user) },
    ...groups.map((g) => ({ name: 'organizationName', value: escapeDnValue(g) })),
  ]
  const pems = await generate(attrs, {
    keyType: 'ec',
    algorithm: 'sha256',
    ...validity(365),
    ca: { key: ca.keyPem, cert: ca.certPem },
    extensions: [
      { name: 'basicConstraints', cA: false, critical: true },
      { name: 'keyUsage', digitalSignature: true, critical: true },
      { name: 'extKeyUsage', clientAuth: true },
    ],
  })
  return { certPem: pems.cert, keyPem: pems.private }
}

/** Key pair for `--service-account-signing-key-file` / `--service-account-key-file`. */
export async function createServiceAccountKeyPair(): Promise<KeyPairPem> {
  const { privateKey, publicKey } = await generateKeyPair('ec', {
    namedCurve: 'prime256v1',
    privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
    publicKeyEncoding: { type: 'spki', format: 'pem' },
  })
  return { privateKeyPem: privateKey, publicKeyPem: publicKey }
}

/** Subject of a PEM certificate, for diagnostics and tests. */
export function describeCert(certPem: string): { subject: string; issuer: string; subjectAltName: string | undefined } {
  const c = new X509Certificate(certPem)
  return { subject: c.subject, issuer: c.issuer, subjectAltName: c.subjectAltName }
}
