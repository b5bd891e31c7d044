import os from 'node:os'
import { fitUtf8, sanitizeText } from '../sanitize.js'
import { ContentType, type KubeHttp } from './http.js'
import { collectionPath, objectPath, type ResourceRef } from './paths.js'
import type { CustomResourceDefinition } from './types.js'

export type EventType = 'Normal' | 'Warning'

export interface EventRecorder {
  record(crd: CustomResourceDefinition, type: EventType, reason: string, message: string): Promise<void>
}

/** What the migrator was doing when an Event happened (events.k8s.io/v1 `action`), where it was not migrating. */
const ACTIONS: Record<string, string> = { MigrationBlocked: 'Preflight', FrozenByAnotherMigrator: 'Observe' }

/** Longest `note` events.k8s.io/v1 accepts, in bytes (its validation counts a Go string's length). */
const NOTE_MAX_BYTES = 1024

/** The same Event again within this long becomes a series (count, lastObservedTime), not a new object. */
const SERIES_WINDOW_MS = 30 * 60_000

const EVENTS: ResourceRef = { group: 'events.k8s.io', version: 'v1', plural: 'events', kind: 'Event', namespaced: true }

export const EVENTS_API = collectionPath(EVENTS, 'default')

/**
 * events.k8s.io/v1 Events about CRDs, a series when repeated (a migration blocked every retry).
 * In `default`, as client-go puts cluster-scoped objects' Events, where kubectl finds them.
 */
export class KubeEventRecorder implements EventRecorder {
  private readonly series = new Map<string, { name: string; count: number; first: number }>()

  constructor(
    private readonly http: KubeHttp,
    private readonly component = 'crd-migrator',
    private readonly instance = process.env.POD_NAME ?? os.hostname(),
    private readonly onError: (err: unknown) => void = () => {},
  ) {}

  async record(crd: CustomResourceDefinition, type: EventType, reason: string, message: string): Promise<void> {
    // May quote a webhook: cleaned (sanitize.ts), within the note's byte limit.
    const note = fitUtf8(sanitizeText(message), NOTE_MAX_BYTES)
    const key = JSON.stringify([crd.metadata.uid, type, reason, note])
    const now = Date.now()
    try {
      const earlier = this.series.get(key)
      if (earlier && now - earlier.first < SERIES_WINDOW_MS) {
        earlier.count++
        await this.http.request({
          method: 'PATCH',
          path: objectPath(EVENTS, 'default', earlier.name),
          contentType: ContentType.mergePatch,
          body: { series: { count: earlier.count, lastObservedTime: microTime(now) } },
        })
        return
      }
      const created = await this.http.request<{ metadata: { name: string } }>({
        method: 'POST',
        path: EVENTS_API,
        body: {
          apiVersion: 'events.k8s.io/v1',
          kind: 'Event',
          // A generateName may not end in '.'.
          metadata: { name: eventName(crd.metadata.name, now), namespace: 'default' },
          eventTime: microTime(now),
          reportingController: `crd-migrator.io/${this.component}`,
          reportingInstance: this.instance.slice(0, 128),
          action: ACTIONS[reason] ?? 'Migrate',
          reason,
          regarding: {
            apiVersion: 'apiextensions.k8s.io/v1',
            kind: 'CustomResourceDefinition',
            name: crd.metadata.name,
            uid: crd.metadata.uid,
            resourceVersion: crd.metadata.resourceVersion,
          },
          note,
          type,
        },
      })
      this.series.set(key, { name: created.body.metadata.name, count: 1, first: now })
    } catch (err) {
      // An Event is a courtesy to the operator; failing to write one must not fail a migration.
      this.series.delete(key)
      this.onError(err)
    }
  }
}

/** `<object>.<time in hex>`, as client-go names Events, within the 253 characters of a name. */
function eventName(object: string, ms: number): string {
  const suffix = (BigInt(ms) * 1_000_000n + (process.hrtime.bigint() % 1_000_000n)).toString(16)
  return `${object.slice(0, 252 - suffix.length).replace(/[.-]+$/, '')}.${suffix}`
}

/** MicroTime: RFC 3339 with microseconds, as events.k8s.io/v1 requires for eventTime and a Lease for its times. */
export function microTime(at: number | Date = new Date()): string {
  return new Date(at).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z')
}
