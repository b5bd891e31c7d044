import { writeFile } from 'node:fs/promises'
import { stringify } from 'yaml'

export interface KubeconfigSpec {
  server: string
  caPem: string
  user: string
  certPem: string
  keyPem: string
  /** Context and cluster name. */
  contextName?: string
}

const b64 = (s: string): string => Buffer.from(s, 'utf8').toString('base64')

/** A self-contained kubeconfig (certificates embedded) using client-certificate auth. */
export function renderKubeconfig(spec: KubeconfigSpec): string {
  const ctx = spec.contextName ?? 'crd-migrator-devenv'
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: ctx, cluster: { server: spec.server, 'certificate-authority-data': b64(spec.caPem) } }],
    users: [{ name: spec.user, user: { 'client-certificate-data': b64(spec.certPem), 'client-key-data': b64(spec.keyPem) } }],
    contexts: [{ name: ctx, context: { cluster: ctx, user: spec.user } }],
    'current-context': ctx,
    preferences: {},
  })
}

export async function writeKubeconfig(path: string, spec: KubeconfigSpec): Promise<void> {
  await writeFile(path, renderKubeconfig(spec), { mode: 0o600 })
}
