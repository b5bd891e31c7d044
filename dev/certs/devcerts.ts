/**
 * Development certificates: a throwaway CA and a serving certificate it signs, for
 * running the webhook locally or in a dev cluster without cert-manager.
 *
 * The CA is reused when a valid one is already in the directory, so regenerating the
 * serving certificate (or rotating it in a test) keeps every caBundle that trusts the CA
 * valid. Each file is written to a temporary name and renamed into place, so a running
 * webhook never reads half a file (it may still see a new cert with the old key for a
 * moment; its reloader waits for a matching pair).
 */
import { X509Certificate, createPrivateKey } from 'node:crypto'
import { chmod, mkdir, readFile, rename, writeFile } from 'node:fs/promises'
import { isIP } from 'node:net'
import { join } from 'node:path'
import { generate } from 'selfsigned'

export interface DevCertificateOptions {
  serviceName?: string
  namespace?: string
  /** More DNS names or IP addresses for the serving certificate. */
  extraHosts?: string[]
  /** Validity of the serving certificate. Default 365 days. */
  validityDays?: number
  /** Reuse ca.crt/ca.key found in dir when valid. Default true. */
  reuseCa?: boolean
}

export interface DevCertificates {
  caCertFile: string
  caKeyFile: string
  certFile: string
  keyFile: string
  caCertPem: string
  certPem: string
  keyPem: string
  /** DNS names and IPs in the serving certificate. */
  hosts: string[]
  /** Serial of the serving certificate (hex, as X509Certificate prints it). */
  serialNumber: string
  caReused: boolean
}

export const DEV_CERT_FILES = Object.freeze({
  caCert: 'ca.crt',
  caKey: 'ca.key',
  cert: 'tls.crt',
  key: 'tls.key',
})

const CA_VALIDITY_DAYS = 3650
const ALGORITHM = 'sha256'
const KEY_SIZE = 2048

/** DNS names/IPs the webhook is reached by: locally, and as the in-cluster Service. */
export function devCertificateHosts(serviceName: string, namespace: string, extraHosts: string[] = []): string[] {
  const hosts = [
    'localhost',
    '127.0.0.1',
    '::1',
    serviceName,
    `${serviceName}.${namespace}`,
    `${serviceName}.${namespace}.svc`,
    `${serviceName}.${namespace}.svc.cluster.local`,
    ...extraHosts,
  ]
  return [...new Set(hosts)]
}

export async function generateDevCertificates(dir: string, options: DevCertificateOptions = {}): Promise<DevCertificates> {
  const serviceName = options.serviceName ?? 'crd-migrator'
  const namespace = options.namespace ?? 'crd-migrator'
  const hosts = devCertificateHosts(serviceName, namespace, options.extraHosts)
  await mkdir(dir, { recursive: true })

  const paths = {
    caCertFile: join(dir, DEV_CERT_FILES.caCert),
    caKeyFile: join(dir, DEV_CERT_FILES.caKey),
    certFile: join(dir, DEV_CERT_FILES.cert),
    keyFile: join(dir, DEV_CERT_FILES.key),
  }

  let ca = options.reuseCa === false ? undefined : await readUsableCa(paths.caCertFile, paths.caKeyFile)
  const caReused = ca !== undefined
  if (!ca) {
    const now = new Date()
    const generated = await generate([{ name: 'commonName', value: `${serviceName} development CA` }], {
      algorithm: ALGORITHM,
      keySize: KEY_SIZE,
      notBeforeDate: new Date(now.getTime() - 60_000),
      notAfterDate: addDays(now, CA_VALIDITY_DAYS),
      extensions: [
        { name: 'basicConstraints', cA: true, critical: true },
        { name: 'keyUsage', keyCertSign: true, cRLSign: true, digitalSignature: true, critical: true },
      ],
    })
    ca = { cert: generated.cert, key: generated.private }
    await writeAtomically(paths.caKeyFile, ca.key, 0o600)
    await writeAtomically(paths.caCertFile, ca.cert, 0o644)
  }

  const now = new Date()
  const serving = await generate([{ name: 'commonName', value: `${serviceName}.${namespace}.svc` }], {
    algorithm: ALGORITHM,
    keySize: KEY_SIZE,
    // A minute of slack for clocks that disagree between the generating and verifying side.
    notBeforeDate: new Date(now.getTime() - 60_000),
    notAfterDate: addDays(now, options.validityDays ?? 365),
    ca,
    extensions: [
      { name: 'basicConstraints', cA: false, critical: true },
      { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
      { name: 'extKeyUsage', serverAuth: true },
      {
        name: 'subjectAltName',
        altNames: hosts.map((host) => (isIP(host) ? { type: 7 as const, ip: host } : { type: 2 as const, value: host })),
      },
    ],
  })

  // Key first, then cert: in between, a running webhook sees a pair that does not match
  // and keeps serving the old one until tls.crt follows.
  await writeAtomically(paths.keyFile, serving.private, 0o600)
  await writeAtomically(paths.certFile, serving.cert, 0o644)

  return {
    ...paths,
    caCertPem: ca.cert,
    certPem: serving.cert,
    keyPem: serving.private,
    hosts,
    serialNumber: new X509Certificate(serving.cert).serialNumber,
    caReused,
  }
}

async function readUsableCa(certFile: string, keyFile: string): Promise<{ cert: string; key: string } | undefined> {
  try {
    const [cert, key] = await Promise.all([readFile(certFile, 'utf8'), readFile(keyFile, 'utf8')])
    const x509 = new X509Certificate(cert)
    const validForAWhile = new Date(x509.validTo).getTime() > Date.now() + 30 * 24 * 3600 * 1000
    if (x509.ca && validForAWhile && x509.checkPrivateKey(createPrivateKey(key))) return { cert, key }
  } catch {
    // Missing or unreadable: make a new CA.
  }
  return undefined
}

async function writeAtomically(file: string, content: string, mode: number): Promise<void> {
  const tmp = `${file}.${process.pid}.${Date.now()}.tmp`
  await writeFile(tmp, content, { mode })
  // writeFile's mode is filtered by the umask; keys must end up 0600 regardless.
  await chmod(tmp, mode)
  await rename(tmp, file)
}

function addDays(date: Date, days: number): Date {
  return new Date(date.getTime() + days * 24 * 3600 * 1000)
}
