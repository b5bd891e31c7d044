/**
 * Closing without failing a review. The drain begins when close() is called (before the
 * shutdown delay) or, at the latest, when the app starts closing; from then on:
 * - the `webhook-open` readiness check fails, so endpoints and the API server stop sending
 *   new connections here;
 * - reviews are still answered (the app does not return 503 while closing: a failed
 *   webhook call is a denied CRD update under failurePolicy: Fail), each with
 *   `Connection: close`, so keep-alive connections do not hold close() open.
 * Registered on the app itself (root-scope.ts): every answer, 404s included, closes its
 * connection once draining.
 */
import type { ReadinessCheck } from '../../health/plugin.js'
import { rootScoped } from './root-scope.js'

export class Drain {
  #draining = false

  get draining(): boolean {
    return this.#draining
  }

  begin(): void {
    this.#draining = true
  }

  /** Fails from the moment the drain begins. */
  readonly readiness: ReadinessCheck = Object.freeze({
    name: 'webhook-open',
    failing: () => (this.#draining ? 'draining: answering in-flight reviews, then closing' : undefined),
  })
}

export interface DrainPluginOptions {
  drain: Drain
}

export const drainPlugin = rootScoped<DrainPluginOptions>(async function drainPlugin(app, { drain }) {
  app.addHook('preClose', async () => {
    drain.begin()
  })
  // Callback style, like the review handler: an async hook costs a promise per review.
  app.addHook('onSend', (_request, reply, payload, done) => {
    // Responses finishing during shutdown close their connection so close() is not held.
    if (drain.draining) reply.header('connection', 'close')
    done(null, payload)
  })
})
