/**
 * A pod's status from its containers, as the kubelet reports it (pure: unit-tested):
 * phase, the conditions PodScheduled, PodReadyToStartContainers, Initialized,
 * ContainersReady and Ready (with their transition times kept), podIP(s), hostIP(s),
 * startTime and each container's ready / started / restartCount / state / lastState.
 */
import type { V1PodSpec } from '@kubernetes/client-node'
import type { ContainerState, JsonContainerStatus, PodStatus } from './kube.js'

export interface ContainerView {
  name: string
  image: string
  imageID: string
  containerID: string
  ready: boolean
  started: boolean
  restartCount: number
  state: ContainerState
  lastState: ContainerState
  /** Terminated for good: restartPolicy says it is not restarted. */
  final: boolean
}

export interface PodView {
  spec: V1PodSpec
  podIP: string | undefined
  hostIP: string
  startTime: string
  sandboxReady: boolean
  containers: ContainerView[]
  /** A pod-level reason and message (e.g. an image the agent cannot run). */
  reason?: string
  message?: string
}

/** The kubelet's phase: Running while a container runs or will run again; Succeeded/Failed once all ended for good. */
export function podPhase(containers: readonly ContainerView[]): string {
  if (containers.some((c) => c.state.running)) return 'Running'
  if (containers.length > 0 && containers.every((c) => c.final && c.state.terminated)) {
    return containers.every((c) => c.state.terminated!.exitCode === 0) ? 'Succeeded' : 'Failed'
  }
  if (containers.some((c) => c.restartCount > 0 || c.lastState.terminated || c.state.terminated)) return 'Running'
  return 'Pending'
}

type Condition = NonNullable<PodStatus['conditions']>[number]

/**
 * The status for `view`; `previous` (the last one written) keeps each condition's
 * lastTransitionTime while its status stays the same.
 */
export function podStatus(view: PodView, previous: PodStatus | undefined, now = new Date().toISOString()): PodStatus {
  const containersReady = view.containers.length > 0 && view.containers.every((c) => c.ready)
  const phase = podPhase(view.containers)
  const notReady = view.containers.filter((c) => !c.ready).map((c) => c.name)
  const cond = (type: string, ok: boolean, reason?: string, message?: string): Condition => {
    const status = ok ? 'True' : 'False'
    const before = previous?.conditions?.find((c) => c.type === type)
    return {
      type,
      status,
      lastProbeTime: null,
      lastTransitionTime: before && before.status === status && before.lastTransitionTime ? before.lastTransitionTime : now,
      ...(reason ? { reason } : {}),
      ...(message ? { message } : {}),
    }
  }
  const terminal = phase === 'Succeeded' || phase === 'Failed'
  const readyReason = terminal ? 'PodCompleted' : containersReady ? undefined : 'ContainersNotReady'
  const readyMessage = containersReady || terminal ? undefined : `containers with unready status: [${notReady.join(' ')}]`
  const status: PodStatus = {
    phase,
    conditions: [
      cond('PodReadyToStartContainers', view.sandboxReady),
      cond('Initialized', true),
      cond('Ready', containersReady, readyReason, readyMessage),
      cond('ContainersReady', containersReady, readyReason, readyMessage),
      cond('PodScheduled', true),
    ],
    hostIP: view.hostIP,
    hostIPs: [{ ip: view.hostIP }],
    startTime: view.startTime,
    qosClass: qosClass(view.spec),
    containerStatuses: view.containers.map((c): JsonContainerStatus => ({
      name: c.name,
      image: c.image,
      imageID: c.imageID,
      ...(c.containerID ? { containerID: c.containerID } : {}),
      ready: c.ready,
      started: c.started,
      restartCount: c.restartCount,
      state: c.state,
      lastState: c.lastState,
    })),
  }
  if (view.podIP) {
    status.podIP = view.podIP
    status.podIPs = [{ ip: view.podIP }]
  }
  if (view.reason) status.reason = view.reason
  if (view.message) status.message = view.message
  return status
}

/** BestEffort without requests or limits, Guaranteed when every container's limits equal its requests for cpu and memory, else Burstable. */
export function qosClass(spec: V1PodSpec): string {
  const cs = spec.containers
  const any = cs.some((c) => Object.keys(c.resources?.requests ?? {}).length + Object.keys(c.resources?.limits ?? {}).length > 0)
  if (!any) return 'BestEffort'
  const guaranteed = cs.every((c) =>
    ['cpu', 'memory'].every((r) => {
      const limit = c.resources?.limits?.[r]
      const request = c.resources?.requests?.[r] ?? limit
      return limit !== undefined && request === limit
    }),
  )
  return guaranteed ? 'Guaranteed' : 'Burstable'
}

/** Status without the times that change on every write, to see whether a write is needed. */
export function statusFingerprint(status: PodStatus): string {
  return JSON.stringify(status)
}
