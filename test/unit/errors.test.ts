import t from 'tap'
import { ConfigError, CrdMigratorError, describeError, ERROR_CODES, errorCode, errorMessage } from '../../src/errors.js'
import { KubeApiError } from '../../src/kube/api-errors.js'
import { CertificateError } from '../../src/webhook/tls.js'

t.test('every error of ours carries its code; anything else is CRDM_INTERNAL', async (t) => {
  t.equal(errorCode(new CrdMigratorError('CRDM_OBJECTS_FAILED', '3 object(s) could not be rewritten')), 'CRDM_OBJECTS_FAILED')
  t.equal(errorCode(new ConfigError('migrator.concurrency: Too small')), 'CRDM_CONFIG_INVALID')
  t.equal(errorCode(new KubeApiError(404, 'GET', '/x', { kind: 'Status', message: 'not found' }, undefined)), 'CRDM_KUBE_API')
  t.equal(errorCode(new CertificateError('expired', 'expired')), 'CRDM_CERTIFICATE')
  t.equal(errorCode(Object.assign(new Error('The operation was aborted'), { name: 'AbortError' })), 'CRDM_ABORTED')
  t.equal(errorCode(new TypeError('x is undefined')), 'CRDM_INTERNAL')
  t.equal(errorCode('a string'), 'CRDM_INTERNAL')
})

t.test('describeError leads with the code; errorMessage needs no cast', async (t) => {
  t.equal(describeError(new ConfigError('bad')), 'CRDM_CONFIG_INVALID: bad')
  t.equal(
    describeError(new KubeApiError(409, 'PATCH', '/y', { kind: 'Status', message: 'conflict' }, undefined)),
    'CRDM_KUBE_API: PATCH /y: 409 conflict',
  )
  t.equal(errorMessage(42), '42')
  t.equal(errorMessage(new Error('m')), 'm')
})

t.test("an API server's message is cleaned and cut: it may quote a webhook", async (t) => {
  const err = new KubeApiError(
    400,
    'PATCH',
    '/y',
    { kind: 'Status', message: `denied\n\u001b]2;title\u0007\u001b[31mred\u0007${'m'.repeat(3000)}` },
    undefined,
  )
  t.match(err.message, /^PATCH \/y: 400 denied redm{1014}…\(3010 characters\)$/)
  t.equal(new KubeApiError(502, 'GET', '/z', 'bad\u001b[0m gateway\n', undefined).message, 'GET /z: 502 bad gateway')
  t.equal(new KubeApiError(503, 'GET', '/z', '', undefined).message, 'GET /z: 503 HTTP 503')
})

t.test('the code is an own enumerable property, so pino logs it with the error', async (t) => {
  const err = new CrdMigratorError('CRDM_STATE_KEY', 'too short', { cause: new Error('ENOENT') })
  t.same(Object.keys(err).includes('code'), true)
  t.equal((err.cause as Error).message, 'ENOENT')
  t.equal(err.name, 'CrdMigratorError')
  t.equal(new ConfigError('x').name, 'ConfigError')
})

t.test('every code has a description', async (t) => {
  for (const [code, text] of Object.entries(ERROR_CODES)) {
    t.match(code, /^CRDM_[A-Z_]+$/)
    t.ok(text.length > 0)
  }
})
