/**
 * What a container is started with (sandbox.ts's {@link ContainerLaunch}): the command
 * (image.ts: command/args over ENTRYPOINT/CMD, `$(VAR)` expanded), the environment
 * (env.ts), the user (runAsUser/runAsGroup of the container, else the pod, else the
 * image's USER; fsGroup and supplementalGroups as groups; runAsNonRoot refuses uid 0),
 * allowPrivilegeEscalation and readOnlyRootFilesystem, the image layers, and the mounts:
 * the volumes (volumes.ts; all but emptyDir read-only) and the pod's /etc/hosts,
 * /etc/hostname and /etc/resolv.conf ({@link writePodFiles}) unless a volume covers them.
 */
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import type { V1Container } from '@kubernetes/client-node'
import type { ApiServerForPods } from './api-proxy.js'
import { containerEnv, ContainerConfigError, expand } from './env.js'
import { commandLine, type ImageSpec } from './image.js'
import { readKeyedData, type Pod } from './kube.js'
import type { AgentContext } from './pod-worker.js'
import type { ContainerLaunch } from './sandbox.js'
import type { PodVolumes } from './volumes.js'

export interface LaunchInput {
  pod: Pod
  container: V1Container
  image: ImageSpec
  podIP: string
  podDir: string
  volumes: PodVolumes
  ctx: AgentContext
}

export async function launchSpec(i: LaunchInput): Promise<ContainerLaunch> {
  const { pod, container: spec, image, ctx } = i
  const env = await containerEnv(spec, {
    pod,
    podIP: i.podIP,
    nodeName: ctx.nodeName,
    hostIP: ctx.network.gateway,
    api: ctx.api,
    imageEnv: image.env,
    nodeCapacity: ctx.nodeCapacity,
    keyed: (kind, name) => readKeyedData(ctx.http, kind, pod.metadata.namespace, name),
  })
  const expandIn = (s: string): string => expand(s, (n) => env.get(n))
  const psc = pod.spec.securityContext ?? {}
  const sc = spec.securityContext ?? {}
  const uid = sc.runAsUser ?? psc.runAsUser ?? image.user.uid
  const gid = sc.runAsGroup ?? psc.runAsGroup ?? image.user.gid
  if ((sc.runAsNonRoot ?? psc.runAsNonRoot) && uid === 0) {
    throw new ContainerConfigError('container has runAsNonRoot and image will run as root')
  }
  const groups = [...new Set([...(psc.fsGroup === undefined ? [] : [psc.fsGroup]), ...(psc.supplementalGroups ?? [])])]
  const mounts = i.volumes.mountsOf(spec.volumeMounts).map((m) => {
    const dir = i.volumes.dirs.get(m.name)
    if (!dir) throw new ContainerConfigError(`volumeMount ${m.name}: no volume of that name`)
    const emptyDir = pod.spec.volumes?.find((v) => v.name === m.name)?.emptyDir !== undefined
    return { source: m.subPath ? join(dir, m.subPath) : dir, mountPath: m.mountPath, readOnly: !emptyDir || m.readOnly === true }
  })
  const own = new Set(mounts.map((m) => m.mountPath))
  for (const f of ['hosts', 'hostname', 'resolv.conf']) {
    if (!own.has(`/etc/${f}`)) mounts.push({ source: join(i.podDir, f), mountPath: `/etc/${f}`, readOnly: true })
  }
  return {
    name: spec.name,
    hostname: pod.spec.hostname ?? pod.metadata.name,
    command: commandLine(image, spec.command?.map(expandIn), spec.args?.map(expandIn)),
    env,
    workingDir: spec.workingDir || image.workingDir,
    uid,
    gid,
    groups,
    noNewPrivs: sc.allowPrivilegeEscalation === false,
    readOnlyRootFilesystem: sc.readOnlyRootFilesystem === true,
    layers: image.layers,
    mounts,
  }
}

/** The pod's /etc/hosts (itself, the API server's name when pods reach it by name, hostAliases), /etc/hostname, /etc/resolv.conf. */
export async function writePodFiles(dir: string, pod: Pod, podIP: string, api: ApiServerForPods): Promise<void> {
  const name = pod.spec.hostname ?? pod.metadata.name
  const hosts = ['127.0.0.1\tlocalhost', '::1\tlocalhost ip6-localhost ip6-loopback', `${podIP}\t${name}`]
  if (api.hostsEntry) hosts.push(`${api.hostsEntry.ip}\t${api.hostsEntry.name}`)
  for (const a of pod.spec.hostAliases ?? []) hosts.push(`${a.ip}\t${(a.hostnames ?? []).join(' ')}`)
  await writeFile(join(dir, 'hosts'), `# Kubernetes-managed hosts file (crd-migrator node agent).\n${hosts.join('\n')}\n`, { mode: 0o644 })
  await writeFile(join(dir, 'hostname'), `${name}\n`, { mode: 0o644 })
  // No cluster DNS: names resolve through /etc/hosts only.
  await writeFile(join(dir, 'resolv.conf'), '# no cluster DNS on the crd-migrator node agent\noptions ndots:1\n', { mode: 0o644 })
}
