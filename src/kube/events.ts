import os from 'node:os'
import type { KubeHttp } from './http.js'
import type { CustomResourceDefinition } from './types.js'

export type EventType = 'Normal' | 'Warning'

export interface EventRecorder {
  record(crd: CustomResourceDefinition, type: EventType, reason: string, message: string): Promise<void>
}

/**
 * core/v1 Events about CRDs. CRDs are cluster-scoped, so, like kubectl and
 * client-go do for cluster-scoped objects, the Events go to the `default` namespace, where
 * `kubectl describe crd` finds them.
 */
export class KubeEventRecorder implements EventRecorder {
  constructor(
    private readonly http: KubeHttp,
    private readonly component = 'crd-migrator',
    private readonly instance = process.env.POD_NAME ?? os.hostname(),
    private readonly onError: (err: unknown) => void = () => {},
  ) {}

  async record(crd: CustomResourceDefinition, type: EventType, reason: string, message: string): Promise<void> {
    const now = new Date().toISOString()
    const event = {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { generateName: `${crd.metadata.name}.`, namespace: 'default' },
      involvedObject: {
        apiVersion: 'apiextensions.k8s.io/v1',
        kind: 'CustomResourceDefinition',
        name: crd.metadata.name,
        uid: crd.metadata.uid,
        resourceVersion: crd.metadata.resourceVersion,
      },
      reason,
      message: message.slice(0, 1024),
      type,
      source: { component: this.component, host: this.instance },
      reportingComponent: this.component,
      reportingInstance: this.instance,
      firstTimestamp: now,
      lastTimestamp: now,
      count: 1,
    }
    try {
      await this.http.request({ method: 'POST', path: '/api/v1/namespaces/default/events', body: event })
    } catch (err) {
      // An Event is a courtesy to the operator; failing to write one must not fail a migration.
      this.onError(err)
    }
  }
}
