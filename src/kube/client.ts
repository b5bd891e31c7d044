import { existsSync } from 'node:fs'
import { KubeConfig } from '@kubernetes/client-node'
import { KubeHttp, type KubeHttpOptions } from './http.js'
import { CrdMigratorError } from '../errors.js'

/**
 * Loads credentials the way kubectl does: an explicit file, else $KUBECONFIG, else
 * ~/.kube/config, else the in-cluster service account.
 */
export function loadKubeConfig(file?: string): KubeConfig {
  const kc = new KubeConfig()
  if (file) {
    if (!existsSync(file)) throw new CrdMigratorError('CRDM_KUBECONFIG', `kubeconfig ${file} does not exist`)
    kc.loadFromFile(file)
  } else {
    kc.loadFromDefault()
  }
  if (!kc.getCurrentCluster()) {
    throw new CrdMigratorError(
      'CRDM_KUBECONFIG',
      'no Kubernetes cluster configured: pass --kubeconfig, set KUBECONFIG, or run inside a cluster',
    )
  }
  return kc
}

export function kubeHttp(file?: string, options?: KubeHttpOptions): KubeHttp {
  return new KubeHttp(loadKubeConfig(file), options)
}
