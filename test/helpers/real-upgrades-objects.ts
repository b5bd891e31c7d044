/**
 * Objects as Cluster API v1.10 (cluster.x-k8s.io/v1beta1) and Tekton Pipelines v0.48
 * (tekton.dev/v1beta1) store them, for test/integration/real-upgrades.test.ts. Their shapes
 * follow the projects' own examples (CAPI's quick-start with CAPD and kubeadm; Tekton's
 * examples/v1beta1): valid for the old release's schema and, once converted, the new one's.
 * Each kind's `spec` is created through the old version, its `status` written through the
 * status subresource, as the controllers do.
 *
 * The fields that the conversions move, drop or add are there on purpose, on some objects
 * only, so a test sees which objects a change touches: MachineDeployments'
 * spec.revisionHistoryLimit and spec.progressDeadlineSeconds, Machines' status.nodeRef.uid,
 * Clusters' status.failureDomains (a map in v1beta1, a list in v1beta2), PipelineRuns'
 * spec.timeout and status.provenance.configSource, TaskRuns' status.provenance.configSource,
 * deprecated step fields of Tasks.
 */
import type { ControlPlane } from '../../dev/controlplane/controlplane.js'
import type { Obj } from './real-upgrades.js'

export interface NewObject {
  plural: string
  name: string
  body: Obj
  status?: Obj
}

const T0 = '2025-06-02T09:00:00Z'
const at = (minutes: number) => new Date(Date.parse(T0) + minutes * 60_000).toISOString().replace('.000Z', 'Z')
const two = (i: number) => String(i).padStart(2, '0')

// --- Cluster API, cluster.x-k8s.io/v1beta1 -------------------------------------------------

/** Providers' kinds the core objects refer to; their CRDs carry CAPI's contract label. */
export const CAPI_PROVIDER_KINDS = [
  { group: 'infrastructure.cluster.x-k8s.io', kind: 'DockerCluster', plural: 'dockerclusters' },
  { group: 'infrastructure.cluster.x-k8s.io', kind: 'DockerMachine', plural: 'dockermachines' },
  { group: 'infrastructure.cluster.x-k8s.io', kind: 'DockerMachineTemplate', plural: 'dockermachinetemplates' },
  { group: 'bootstrap.cluster.x-k8s.io', kind: 'KubeadmConfig', plural: 'kubeadmconfigs' },
  { group: 'bootstrap.cluster.x-k8s.io', kind: 'KubeadmConfigTemplate', plural: 'kubeadmconfigtemplates' },
  { group: 'controlplane.cluster.x-k8s.io', kind: 'KubeadmControlPlane', plural: 'kubeadmcontrolplanes' },
]

/**
 * Stand-ins for the providers' CRDs (CAPD, CABPK, KCP at the v1beta1 contract), only what
 * CAPI's conversion reads of them: their name and the `cluster.x-k8s.io/v1beta1: v1beta1`
 * contract label (v1beta2 references name a group; converting back asks which version).
 */
export function capiProviderCrds(): Obj[] {
  return CAPI_PROVIDER_KINDS.map((p) => ({
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${p.plural}.${p.group}`, labels: { 'cluster.x-k8s.io/v1beta1': 'v1beta1' } },
    spec: {
      group: p.group,
      scope: 'Namespaced',
      names: { plural: p.plural, kind: p.kind, singular: p.kind.toLowerCase(), listKind: `${p.kind}List` },
      versions: [
        {
          name: 'v1beta1',
          served: true,
          storage: true,
          schema: { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } },
        },
      ],
    },
  }))
}

const condition = (type: string, minutes: number, status = 'True') => ({ type, status, lastTransitionTime: at(minutes) })

export function capiObjects(ns: string, count: number): NewObject[] {
  const out: NewObject[] = []
  const ref = (apiVersion: string, kind: string, name: string) => ({ apiVersion, kind, name, namespace: ns })
  for (let i = 0; i < count; i++) {
    const cluster = `cluster-${two(i)}`
    const clusterLabel = { 'cluster.x-k8s.io/cluster-name': cluster }
    out.push({
      plural: 'clusters',
      name: cluster,
      body: {
        apiVersion: 'cluster.x-k8s.io/v1beta1',
        kind: 'Cluster',
        metadata: { name: cluster, namespace: ns, labels: { cni: 'calico', env: i % 2 ? 'prod' : 'dev' } },
        spec: {
          clusterNetwork: {
            pods: { cidrBlocks: ['192.168.0.0/16'] },
            services: { cidrBlocks: ['10.128.0.0/12'] },
            serviceDomain: 'cluster.local',
          },
          controlPlaneEndpoint: { host: `172.18.0.${i + 2}`, port: 6443 },
          controlPlaneRef: ref('controlplane.cluster.x-k8s.io/v1beta1', 'KubeadmControlPlane', `${cluster}-control-plane`),
          infrastructureRef: ref('infrastructure.cluster.x-k8s.io/v1beta1', 'DockerCluster', cluster),
          ...(i % 5 === 4 ? { paused: true } : {}),
        },
      },
      status: {
        phase: 'Provisioned',
        infrastructureReady: true,
        controlPlaneReady: true,
        observedGeneration: 1,
        ...(i % 2 === 0
          ? { failureDomains: { 'fd-a': { controlPlane: true }, 'fd-b': { controlPlane: false, attributes: { zone: 'b' } } } }
          : {}),
        conditions: [condition('Ready', 5), condition('ControlPlaneInitialized', 3), condition('InfrastructureReady', 1)],
      },
    })

    const md = `${cluster}-md-0`
    const mdLabels = { ...clusterLabel, 'cluster.x-k8s.io/deployment-name': md }
    const templateSpec = (name: string) => ({
      clusterName: cluster,
      version: 'v1.32.2',
      bootstrap: { configRef: ref('bootstrap.cluster.x-k8s.io/v1beta1', 'KubeadmConfigTemplate', `${name}-bootstrap`) },
      infrastructureRef: ref('infrastructure.cluster.x-k8s.io/v1beta1', 'DockerMachineTemplate', `${name}-infra`),
      failureDomain: 'fd-a',
      nodeDrainTimeout: '5m0s',
    })
    out.push({
      plural: 'machinedeployments',
      name: md,
      body: {
        apiVersion: 'cluster.x-k8s.io/v1beta1',
        kind: 'MachineDeployment',
        metadata: { name: md, namespace: ns, labels: clusterLabel },
        spec: {
          clusterName: cluster,
          replicas: 3,
          minReadySeconds: 10,
          // Deprecated in v1beta1, gone in v1beta2: set on most, not all.
          ...(i % 4 !== 3 ? { revisionHistoryLimit: 1, progressDeadlineSeconds: 600 } : {}),
          selector: { matchLabels: mdLabels },
          strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0, deletePolicy: 'Oldest' } },
          template: { metadata: { labels: mdLabels }, spec: templateSpec(md) },
        },
      },
      status: {
        observedGeneration: 1,
        selector: Object.entries(mdLabels)
          .map(([k, v]) => `${k}=${v}`)
          .join(','),
        replicas: 3,
        updatedReplicas: 3,
        readyReplicas: 3,
        availableReplicas: 3,
        unavailableReplicas: 0,
        phase: 'Running',
        conditions: [condition('Ready', 9), condition('Available', 9)],
      },
    })

    const ms = `${md}-7c9f8`
    const msLabels = { ...mdLabels, 'cluster.x-k8s.io/set-name': ms }
    out.push({
      plural: 'machinesets',
      name: ms,
      body: {
        apiVersion: 'cluster.x-k8s.io/v1beta1',
        kind: 'MachineSet',
        metadata: { name: ms, namespace: ns, labels: mdLabels, annotations: { 'machinedeployment.clusters.x-k8s.io/revision': '1' } },
        spec: {
          clusterName: cluster,
          replicas: 3,
          minReadySeconds: 10,
          deletePolicy: 'Oldest',
          selector: { matchLabels: msLabels },
          template: { metadata: { labels: msLabels }, spec: templateSpec(md) },
        },
      },
      status: {
        observedGeneration: 1,
        selector: Object.entries(msLabels)
          .map(([k, v]) => `${k}=${v}`)
          .join(','),
        replicas: 3,
        fullyLabeledReplicas: 3,
        readyReplicas: 3,
        availableReplicas: 3,
        conditions: [condition('Ready', 8), condition('MachinesReady', 8)],
      },
    })

    const machine = `${ms}-x${two(i)}q`
    out.push({
      plural: 'machines',
      name: machine,
      body: {
        apiVersion: 'cluster.x-k8s.io/v1beta1',
        kind: 'Machine',
        metadata: { name: machine, namespace: ns, labels: msLabels },
        spec: {
          clusterName: cluster,
          version: 'v1.32.2',
          bootstrap: {
            configRef: ref('bootstrap.cluster.x-k8s.io/v1beta1', 'KubeadmConfig', `${machine}-bootstrap`),
            dataSecretName: `${machine}-bootstrap`,
          },
          infrastructureRef: ref('infrastructure.cluster.x-k8s.io/v1beta1', 'DockerMachine', machine),
          providerID: `docker:////${machine}`,
          failureDomain: 'fd-a',
          nodeDrainTimeout: '5m0s',
        },
      },
      status: {
        // A node reference as v1.10 writes it; v1beta2 keeps the name only.
        ...(i % 4 !== 3
          ? { nodeRef: { apiVersion: 'v1', kind: 'Node', name: machine, uid: `5d3c5e6a-0b8e-4a53-9c1e-00000000${two(i)}${two(i)}` } }
          : {}),
        phase: i % 4 !== 3 ? 'Running' : 'Provisioning',
        bootstrapReady: true,
        infrastructureReady: i % 4 !== 3,
        lastUpdated: at(7),
        observedGeneration: 1,
        addresses: [
          { type: 'InternalIP', address: `172.18.1.${i + 2}` },
          { type: 'Hostname', address: machine },
        ],
        nodeInfo: {
          architecture: 'amd64',
          bootID: `b0${two(i)}`,
          containerRuntimeVersion: 'containerd://2.0.3',
          kernelVersion: '6.8.0-1015-gcp',
          kubeProxyVersion: 'v1.32.2',
          kubeletVersion: 'v1.32.2',
          machineID: `m0${two(i)}`,
          operatingSystem: 'linux',
          osImage: 'Debian GNU/Linux 12 (bookworm)',
          systemUUID: `s0${two(i)}`,
        },
        conditions: [condition('Ready', 7), condition('BootstrapReady', 2), condition('InfrastructureReady', 4)],
      },
    })
  }
  return out
}

// --- Tekton Pipelines, tekton.dev/v1beta1 --------------------------------------------------

const SUM_SCRIPT = '#!/usr/bin/env bash\necho -n $(( "$(params.a)" + "$(params.b)" )) | tee $(results.sum.path)\n'

function taskSpec(i: number): Obj {
  return {
    description: 'A simple task that sums the two provided integers',
    params: [
      { name: 'a', type: 'string', default: '1', description: 'The first integer' },
      { name: 'b', type: 'string', default: '1', description: 'The second integer' },
    ],
    results: [{ name: 'sum', description: 'the sum of the integers' }],
    workspaces: [{ name: 'source', mountPath: '/workspace/source' }],
    steps: [
      {
        name: 'sum',
        image: 'bash:5.2',
        script: SUM_SCRIPT,
        env: [{ name: 'HOME', value: '/tekton/home' }],
        // A Step field v1beta1 deprecates (a Container field v1 no longer has) on some Tasks.
        ...(i % 4 === 0 ? { terminationMessagePath: '/tekton/termination' } : {}),
      },
    ],
  }
}

function pipelineSpec(i: number, task: string): Obj {
  return {
    params: [
      { name: 'x', type: 'string', default: '1' },
      { name: 'y', type: 'string', default: '1' },
    ],
    workspaces: [{ name: 'shared' }],
    tasks: [
      {
        name: 'sum',
        taskRef: { name: task, kind: 'Task' },
        params: [
          { name: 'a', value: '$(params.x)' },
          { name: 'b', value: '$(params.y)' },
        ],
        workspaces: [{ name: 'source', workspace: 'shared' }],
        ...(i % 3 === 0 ? { timeout: '10m0s', retries: 1 } : {}),
      },
    ],
    results: [{ name: 'total', description: 'the sum', value: '$(tasks.sum.results.sum)' }],
  }
}

const configSource = (i: number) => ({
  uri: 'git+https://github.com/tektoncd/catalog.git',
  digest: { sha1: `a5d6c7e8f9${two(i)}b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7` },
  entryPoint: 'task/sum/0.1/sum.yaml',
})

export function tektonObjects(ns: string, count: number): NewObject[] {
  const out: NewObject[] = []
  for (let i = 0; i < count; i++) {
    const task = `sum-${two(i)}`
    out.push({
      plural: 'tasks',
      name: task,
      body: {
        apiVersion: 'tekton.dev/v1beta1',
        kind: 'Task',
        metadata: { name: task, namespace: ns, annotations: { description: 'A simple task that sums the two provided integers' } },
        spec: taskSpec(i),
      },
    })
    const pipeline = `pipeline-with-params-${two(i)}`
    out.push({
      plural: 'pipelines',
      name: pipeline,
      body: {
        apiVersion: 'tekton.dev/v1beta1',
        kind: 'Pipeline',
        metadata: { name: pipeline, namespace: ns },
        spec: pipelineSpec(i, task),
      },
    })

    const taskRun = `${task}-run-${two(i)}`
    const succeeded = {
      type: 'Succeeded',
      status: 'True',
      reason: 'Succeeded',
      message: 'All Steps have completed executing',
      lastTransitionTime: at(2),
    }
    out.push({
      plural: 'taskruns',
      name: taskRun,
      body: {
        apiVersion: 'tekton.dev/v1beta1',
        kind: 'TaskRun',
        metadata: { name: taskRun, namespace: ns, labels: { 'tekton.dev/task': task } },
        spec: {
          taskRef: { name: task, kind: 'Task' },
          params: [
            { name: 'a', value: String(i) },
            { name: 'b', value: '3' },
          ],
          serviceAccountName: 'build-bot',
          timeout: '30m0s',
          workspaces: [{ name: 'source', emptyDir: {} }],
          podTemplate: { nodeSelector: { 'kubernetes.io/arch': 'amd64' } },
        },
      },
      status: {
        podName: `${taskRun}-pod`,
        startTime: at(0),
        completionTime: at(2),
        conditions: [succeeded],
        steps: [
          {
            name: 'sum',
            container: 'step-sum',
            imageID: 'docker.io/library/bash@sha256:4f3b0a42b7d7a5e9c37e0f5e3d2c1b0a9f8e7d6c5b4a39281706f5e4d3c2b1a0',
            terminated: { exitCode: 0, reason: 'Completed', startedAt: at(1), finishedAt: at(2), containerID: `containerd://${two(i)}ab` },
          },
        ],
        taskResults: [{ name: 'sum', type: 'string', value: String(i + 3) }],
        taskSpec: taskSpec(i),
        // Written by v0.48's controller for a remote Task; v0.49 has refSource instead.
        ...(i % 2 === 0 ? { provenance: { configSource: configSource(i) } } : {}),
      },
    })

    const pipelineRun = `${pipeline}-run-${two(i)}`
    out.push({
      plural: 'pipelineruns',
      name: pipelineRun,
      body: {
        apiVersion: 'tekton.dev/v1beta1',
        kind: 'PipelineRun',
        metadata: { name: pipelineRun, namespace: ns, labels: { 'tekton.dev/pipeline': pipeline } },
        spec: {
          pipelineRef: { name: pipeline },
          params: [
            { name: 'x', value: String(i) },
            { name: 'y', value: '2' },
          ],
          serviceAccountName: 'build-bot',
          // Deprecated in v1beta1 (spec.timeouts.pipeline in v1) on most runs, the new field on the rest.
          ...(i % 4 !== 3 ? { timeout: '1h0m0s' } : { timeouts: { pipeline: '1h0m0s', tasks: '50m0s' } }),
          workspaces: [
            {
              name: 'shared',
              volumeClaimTemplate: { spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } } },
            },
          ],
        },
      },
      status: {
        startTime: at(0),
        completionTime: at(3),
        conditions: [{ ...succeeded, message: 'Tasks Completed: 1 (Failed: 0, Cancelled 0), Skipped: 0', lastTransitionTime: at(3) }],
        pipelineSpec: pipelineSpec(i, task),
        childReferences: [{ apiVersion: 'tekton.dev/v1beta1', kind: 'TaskRun', name: `${pipelineRun}-sum`, pipelineTaskName: 'sum' }],
        pipelineResults: [{ name: 'total', value: String(i + 2) }],
        ...(i % 2 === 0 ? { provenance: { configSource: configSource(i) } } : {}),
      },
    })
  }
  return out
}

/** Creates each object through `group/version`, then writes its status through the status subresource; `concurrency` at a time. */
export async function createObjects(
  cp: ControlPlane,
  group: string,
  version: string,
  ns: string,
  objects: readonly NewObject[],
  concurrency = 8,
): Promise<void> {
  const queue = [...objects]
  const worker = async (): Promise<void> => {
    for (let o = queue.shift(); o; o = queue.shift()) {
      const base = `/apis/${group}/${version}/namespaces/${ns}/${o.plural}`
      const res = await cp.apiRequest(base, { method: 'POST', body: o.body })
      if (res.status !== 201) throw new Error(`create ${o.plural} ${o.name}: HTTP ${res.status} ${res.body.slice(0, 500)}`)
      if (o.status) {
        const st = await cp.apiRequest(`${base}/${o.name}/status`, {
          method: 'PATCH',
          body: { status: o.status },
          contentType: 'application/merge-patch+json',
        })
        if (st.status !== 200) throw new Error(`status of ${o.plural} ${o.name}: HTTP ${st.status} ${st.body.slice(0, 500)}`)
      }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
}
