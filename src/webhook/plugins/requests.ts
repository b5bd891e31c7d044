/**
 * Which requests reach a route (root scope, so the 404s too): non-JSON 415, over bodyLimit 413,
 * past the shape limits (limits.ts) or invalid JSON 400, unknown route 404. Each refusal is a
 * JSON `{ error }` and one warning line; any other failure a 500 saying nothing of why (the log does).
 */
import type { FastifyError } from 'fastify'
import { CrdMigratorError, errorMessage } from '../../errors.js'
import { checkJsonShape, jsonShapeLimits, LOG_MESSAGE_MAX, truncateForLog, type JsonShapeViolation } from '../limits.js'
import type { WebhookMetrics } from '../metrics.js'
import { rootScoped } from './root-scope.js'
import { VALIDATE_PATH } from './validate.js'

export interface RequestsPluginOptions {
  /** The app's bodyLimit: the JSON shape limits follow from it, and the 413 names it. */
  bodyLimit: number
  metrics: WebhookMetrics
}

export const requestsPlugin = rootScoped<RequestsPluginOptions>(async function requestsPlugin(app, options) {
  const { bodyLimit, metrics } = options
  const shapeLimits = jsonShapeLimits(bodyLimit)

  // The only parser, so Fastify answers other media types 415. Ours keeps JSON.parse's reason
  // (Fastify's says only "not valid JSON"); safe, as bodies are only read, never merged. The
  // shape is checked first (limits.ts): JSON.parse cannot be interrupted.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, body, done) => {
    const violation = checkJsonShape(body as Buffer, shapeLimits)
    if (violation) return done(badRequest(describeShapeViolation(violation)), undefined)
    const text = (body as Buffer).toString('utf8')
    if (text.trim() === '') return done(badRequest('body is empty; expected an AdmissionReview as JSON'), undefined)
    try {
      done(null, JSON.parse(text))
    } catch (err) {
      done(badRequest(`body is not valid JSON: ${truncateForLog(errorMessage(err), LOG_MESSAGE_MAX)}`), undefined)
    }
  })

  app.setErrorHandler((error: FastifyError, request, reply) => {
    const status = error.statusCode ?? 500
    if (status >= 500 || status < 400) {
      request.log.error({ err: error }, 'unhandled error')
      return reply.code(500).send({ error: 'internal server error' })
    }
    const message = describeHttpError(error, request.headers['content-type'], bodyLimit)
    if (request.url.startsWith(VALIDATE_PATH)) metrics.countBadRequest(status)
    request.log.warn({ status, error: truncateForLog(message, LOG_MESSAGE_MAX), url: truncateForLog(request.url) }, 'bad request')
    return reply.code(status).send({ error: message })
  })

  app.setNotFoundHandler((request, reply) => reply.code(404).send({ error: `no route for ${request.method} ${request.url}` }))
})

function badRequest(message: string): FastifyError {
  return Object.assign(new CrdMigratorError('CRDM_REVIEW_MALFORMED', message), { statusCode: 400 })
}

function describeShapeViolation(violation: JsonShapeViolation): string {
  return violation.limit === 'depth'
    ? `body nests JSON objects and arrays deeper than ${violation.max} levels, the limit; refused before parsing`
    : `body holds more than ${violation.max} JSON objects and arrays, the limit; refused before parsing`
}

function describeHttpError(error: FastifyError, contentType: string | undefined, bodyLimit: number): string {
  switch (error.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return `content-type must be application/json, got ${contentType ? JSON.stringify(contentType) : 'none'}`
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return `request body exceeds the limit of ${bodyLimit} bytes`
    default:
      return error.message
  }
}
