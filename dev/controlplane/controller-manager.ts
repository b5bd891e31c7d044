/** kube-controller-manager of an owned control plane: its slot, its flags, its health check. */
import { get as httpsGet } from 'node:https'
import type { ManagedProcess } from './process.js'

/** kube-controller-manager of an owned control plane (ControlPlaneOptions.controllerManager in types.ts). */
export interface ControllerManagerSlot {
  flags: Record<string, string>
  env: NodeJS.ProcessEnv
  /** Its secure port on 127.0.0.1 (/healthz). */
  port: number
  logFile: string
  pidFile: string
  process: ManagedProcess | undefined
}

export const KCM_CONTROLLERS = ['garbage-collector-controller', 'storage-version-migrator-controller']

/** Flags, and the apiserver flags they need, for kube-controller-manager running the built-in storage version migrator. */
export function controllerManagerFlags(
  kubeMinor: number | undefined,
  kubeconfig: string,
  port: number,
  certDir: string,
): { flags: Record<string, string>; env: NodeJS.ProcessEnv; apiserverFlags: Record<string, string> } {
  const flags: Record<string, string> = {
    kubeconfig,
    'bind-address': '127.0.0.1',
    'secure-port': String(port),
    'cert-dir': certDir,
    controllers: KCM_CONTROLLERS.join(','),
    'use-service-account-credentials': 'true',
    'leader-elect': 'false',
  }
  // GA and on by default from 1.37; beta (off) in 1.35-1.36, alpha (v1alpha1) before.
  if (kubeMinor !== undefined && kubeMinor < 37) {
    flags['feature-gates'] = 'StorageVersionMigrator=true'
    const api = kubeMinor < 35 ? 'storagemigration.k8s.io/v1alpha1' : 'storagemigration.k8s.io/v1beta1'
    return {
      flags,
      env: { ...process.env, KUBE_FEATURE_InformerResourceVersion: 'true', KUBE_FEATURE_InOrderInformers: 'true' },
      apiserverFlags: { 'feature-gates': 'StorageVersionMigrator=true', 'runtime-config': `${api}=true` },
    }
  }
  return { flags, env: process.env, apiserverFlags: {} }
}

/** Whether an HTTPS /healthz answers 200 (the controller manager's self-signed serving certificate is not checked). */
export function httpsHealthy(url: string, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const req = httpsGet(url, { rejectUnauthorized: false, timeout: timeoutMs }, (res) => {
      res.resume()
      resolve(res.statusCode === 200)
    })
    req.on('timeout', () => req.destroy())
    req.on('error', () => resolve(false))
  })
}
