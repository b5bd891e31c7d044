/**
 * The agent's Node: created (or taken over) with the labels a kubelet sets, spec.podCIDR,
 * and a status the control plane accepts as a Ready node: the conditions Ready (True,
 * KubeletReady) and Memory/Disk/PIDPressure (False), addresses InternalIP (the pods'
 * gateway, network.ts) and Hostname, capacity = allocatable (this machine's CPUs and
 * memory, 110 pods), nodeInfo (kubeletVersion: the API server's version, so no skew). The
 * heartbeat renews its Lease in kube-node-lease every 10 s and posts the status every
 * minute; {@link NodeRegistration.stop} marks it NotReady.
 */
import { readFileSync } from 'node:fs'
import { arch, availableParallelism, release, totalmem } from 'node:os'
import type { KubeHttp } from '../../src/kube/http.js'
import { ContentType } from '../../src/kube/http.js'
import { isConflict, isNotFound } from '../../src/kube/api-errors.js'
import { describeError } from './kube.js'

export interface NodeOptions {
  http: KubeHttp
  name: string
  internalIP: string
  podCIDR: string
  labels?: Record<string, string>
  log: (msg: string) => void
}

const microTime = (): string => new Date().toISOString().replace(/Z$/, '000Z')

function osImage(): string {
  try {
    return /^PRETTY_NAME="?([^"\n]*)"?$/m.exec(readFileSync('/etc/os-release', 'utf8'))?.[1] ?? 'Linux'
  } catch {
    return 'Linux'
  }
}

export class NodeRegistration {
  readonly capacity = { cpu: availableParallelism(), memory: totalmem() }
  private kubeletVersion = 'v0.0.0'
  private timers: NodeJS.Timeout[] = []

  constructor(private readonly o: NodeOptions) {}

  get labels(): Record<string, string> {
    return {
      'kubernetes.io/hostname': this.o.name,
      'kubernetes.io/os': 'linux',
      'kubernetes.io/arch': arch() === 'x64' ? 'amd64' : arch(),
      'node.crd-migrator.io/agent': 'true',
      ...this.o.labels,
    }
  }

  /** Create the Node (or update the one of that name), post its status, start the heartbeat. */
  async register(): Promise<void> {
    const { http, name } = this.o
    const version = await http.request<{ gitVersion?: string }>({ method: 'GET', path: '/version' })
    this.kubeletVersion = version.body.gitVersion ?? this.kubeletVersion
    const node = {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name, labels: this.labels, annotations: { 'node.alpha.kubernetes.io/ttl': '0' } },
      spec: { podCIDR: this.o.podCIDR, podCIDRs: [this.o.podCIDR] },
    }
    try {
      await http.request({ method: 'POST', path: '/api/v1/nodes', body: node })
    } catch (err) {
      if (!isConflict(err)) throw err
      await http.request({
        method: 'PATCH',
        path: `/api/v1/nodes/${name}`,
        contentType: ContentType.mergePatch,
        body: { metadata: { labels: this.labels }, spec: node.spec },
      })
    }
    await this.postStatus(true)
    await this.renewLease()
    const every = (ms: number, f: () => Promise<void>): void => {
      const t = setInterval(() => void f().catch((err: unknown) => this.o.log(`node heartbeat: ${describeError(err)}`)), ms)
      t.unref()
      this.timers.push(t)
    }
    every(10_000, () => this.renewLease())
    every(60_000, () => this.postStatus(true))
  }

  private async postStatus(ready: boolean): Promise<void> {
    const now = new Date().toISOString().replace(/\.\d+Z$/, 'Z')
    const cond = (type: string, status: string, reason: string, message: string) => ({
      type,
      status,
      reason,
      message,
      lastHeartbeatTime: now,
      lastTransitionTime: now,
    })
    const resources = { cpu: String(this.capacity.cpu), memory: `${Math.floor(this.capacity.memory / 1024)}Ki`, pods: '110' }
    await this.o.http.request({
      method: 'PATCH',
      path: `/api/v1/nodes/${this.o.name}/status`,
      contentType: ContentType.mergePatch,
      body: {
        status: {
          conditions: [
            cond('MemoryPressure', 'False', 'KubeletHasSufficientMemory', 'kubelet has sufficient memory available'),
            cond('DiskPressure', 'False', 'KubeletHasNoDiskPressure', 'kubelet has no disk pressure'),
            cond('PIDPressure', 'False', 'KubeletHasSufficientPID', 'kubelet has sufficient PID available'),
            ready
              ? cond('Ready', 'True', 'KubeletReady', 'the crd-migrator node agent is posting ready status')
              : cond('Ready', 'False', 'KubeletNotReady', 'the crd-migrator node agent stopped'),
          ],
          addresses: [
            { type: 'InternalIP', address: this.o.internalIP },
            { type: 'Hostname', address: this.o.name },
          ],
          capacity: resources,
          allocatable: resources,
          daemonEndpoints: { kubeletEndpoint: { Port: 0 } },
          nodeInfo: {
            machineID: '',
            systemUUID: '',
            bootID: '',
            kernelVersion: release(),
            osImage: osImage(),
            containerRuntimeVersion: 'crd-migrator-agent://0.1.0',
            kubeletVersion: this.kubeletVersion,
            kubeProxyVersion: '',
            operatingSystem: 'linux',
            architecture: this.labels['kubernetes.io/arch'],
          },
        },
      },
    })
  }

  private async renewLease(): Promise<void> {
    const { http, name } = this.o
    const path = `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${name}`
    try {
      await http.request({ method: 'PATCH', path, contentType: ContentType.mergePatch, body: { spec: { renewTime: microTime() } } })
    } catch (err) {
      if (!isNotFound(err)) throw err
      await http.request({
        method: 'POST',
        path: '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases',
        body: {
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { name },
          spec: { holderIdentity: name, leaseDurationSeconds: 40, renewTime: microTime() },
        },
      })
    }
  }

  /** Heartbeat off; the Node NotReady (best effort). */
  async stop(): Promise<void> {
    for (const t of this.timers) clearInterval(t)
    this.timers = []
    await this.postStatus(false).catch((err: unknown) => this.o.log(`marking the node NotReady: ${describeError(err)}`))
  }
}
