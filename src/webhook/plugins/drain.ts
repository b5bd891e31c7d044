/**
 * Closing without failing a review (under failurePolicy: Fail that is a denied CRD update).
 * From close() on, `webhook-open` fails so endpoints stop sending, and every answer (root
 * scope: 404s too) carries `Connection: close` so keep-alive connections do not hold close() open.
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

  readonly readiness: ReadinessCheck = Object.freeze({
    name: 'webhook-open',
    failing: () => (this.#draining ? 'draining: answering in-flight reviews, then closing' : undefined),
  })
}

export const drainPlugin = rootScoped<{ drain: Drain }>(async function drainPlugin(app, { drain }) {
  app.addHook('preClose', async () => {
    drain.begin()
  })
  // Callback style, like the review handler: an async hook costs a promise per review.
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (drain.draining) reply.header('connection', 'close')
    done(null, payload)
  })
})
