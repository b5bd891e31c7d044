/**
 * The workload controllers the node agent's pods need, as a kube-controller-manager of its
 * own next to a control plane of the harness: the harness's controller manager
 * (`controllerManager: true`) runs only the garbage collector and the storage version
 * migrator, and takes no extra flags.
 *
 *   const kcm = await startWorkloadControllers(cp)   // Deployments -> ReplicaSets -> Pods, EndpointSlices
 *   await kcm.stop()
 *
 * Flags (the harness's identity and style: user system:kube-controller-manager by client
 * certificate, one ServiceAccount per controller, no leader election):
 *
 *   --controllers=deployment-controller,replicaset-controller,endpointslice-controller,
 *                 endpoints-controller,serviceaccount-controller,garbage-collector-controller
 *
 * deployment and replicaset make the pods; endpointslice fills a Service's EndpointSlices
 * with the ready pod IPs, which kube-apiserver 1.33+ dials for webhooks and the service
 * proxy with --enable-aggregator-routing=true (1.30 reads Endpoints there: hence
 * endpoints-controller); serviceaccount creates each namespace's `default` ServiceAccount
 * (pods' tokens are requested for it); the garbage collector removes the ReplicaSets and
 * pods of a deleted Deployment.
 */
import { get as httpsGet } from 'node:https'
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ensureBinaries } from '../controlplane/binaries.js'
import type { ControlPlane } from '../controlplane/controlplane.js'
import { freePorts } from '../controlplane/ports.js'
import { ManagedProcess, releaseDirAtExit, removeDirAtExit, startGuard } from '../controlplane/process.js'
import { poll } from '../wait.js'

export const WORKLOAD_CONTROLLERS = [
  'deployment-controller',
  'replicaset-controller',
  'endpointslice-controller',
  'endpoints-controller',
  'serviceaccount-controller',
  'garbage-collector-controller',
]

export interface WorkloadControllers {
  logFile: string
  stop(): Promise<void>
}

function healthy(url: string): Promise<boolean> {
  return new Promise((resolve) => {
    const req = httpsGet(url, { rejectUnauthorized: false, timeout: 1000 }, (res) => {
      res.resume()
      resolve(res.statusCode === 200)
    })
    req.on('timeout', () => req.destroy())
    req.on('error', () => resolve(false))
  })
}

/** kube-controller-manager with {@link WORKLOAD_CONTROLLERS} against `cp`'s first API server; resolves once /healthz answers. */
export async function startWorkloadControllers(
  cp: ControlPlane,
  options: { controllers?: string[]; readyTimeoutMs?: number } = {},
): Promise<WorkloadControllers> {
  const bins = await ensureBinaries()
  if (!bins.kubeControllerManager)
    throw new Error(`kube-controller-manager is not in ${bins.binDir} (scripts/build-controlplane.sh builds it)`)
  const dir = await mkdtemp(join(tmpdir(), 'crd-migrator-kcm-'))
  removeDirAtExit(dir)
  await mkdir(join(dir, 'run'))
  const guard = startGuard(dir)
  const user = await cp.mintUser('system:kube-controller-manager')
  const [port] = (await freePorts(1)) as [number]
  const logFile = join(dir, 'kube-controller-manager.log')
  const proc = ManagedProcess.start({
    name: 'kube-controller-manager',
    command: bins.kubeControllerManager,
    args: [
      `--kubeconfig=${user.kubeconfigPath}`,
      '--bind-address=127.0.0.1',
      `--secure-port=${port}`,
      `--cert-dir=${join(dir, 'certs')}`,
      `--controllers=${(options.controllers ?? WORKLOAD_CONTROLLERS).join(',')}`,
      '--use-service-account-credentials=true',
      '--leader-elect=false',
    ],
    logFile,
    pidFile: join(dir, 'run', 'kube-controller-manager.pid'),
  })
  const stop = async (): Promise<void> => {
    await proc.stop(5000)
    guard.disarm()
    await rm(dir, { recursive: true, force: true })
    releaseDirAtExit(dir)
  }
  const timeoutMs = options.readyTimeoutMs ?? 60_000
  const outcome = await poll(
    timeoutMs,
    async () => {
      if (!proc.running) return 'exited during startup'
      return (await healthy(`https://127.0.0.1:${port}/healthz`)) ? 'healthy' : undefined
    },
    { everyMs: 200 },
  )
  if (outcome !== 'healthy') {
    const tail = proc.tail(20)
    await stop()
    throw new Error(`kube-controller-manager ${outcome ?? `not healthy after ${timeoutMs}ms`}:\n${tail}`)
  }
  return { logFile, stop }
}
