/**
 * The API server's warnings (issue 43): read from every answer's `Warning:` headers in
 * KubeHttp, printed by the CLI as kubectl does, once per distinct text.
 */
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { KubeHttp } from '../../src/kube/http.js'
import { parseWarningHeader, warningPrinter } from '../../src/kube/warnings.js'

t.test('warning headers: 299 texts, joined values, escapes, dates; others skipped', async (t) => {
  t.same(parseWarningHeader(undefined), [])
  t.same(parseWarningHeader('299 - "spec.foo is deprecated"'), ['spec.foo is deprecated'])
  t.same(
    parseWarningHeader('299 - "a, with a comma", 299 kube-apiserver "b \\"quoted\\"" "Sat, 28 Nov 2026 17:00:00 GMT",199 - "not shown"'),
    ['a, with a comma', 'b "quoted"'],
    'node:http joins repeated headers with ", "; commas inside the quotes stay',
  )
  t.same(parseWarningHeader(['299 - "one"', '299 - "two"']), ['one', 'two'], 'as an array')
  t.same(parseWarningHeader('garbage'), [], 'malformed: nothing')
})

t.test('the printer: "Warning: text" once per distinct text, cleaned', async (t) => {
  let out = ''
  const print = warningPrinter({ write: (s: string) => ((out += s), true) })
  print('break-glass override by user "alice": x set')
  print('break-glass override by user "alice": x set')
  print('evil \u001b[2Jclear')
  print('')
  t.equal(out, 'Warning: break-glass override by user "alice": x set\nWarning: evil clear\n')
})

t.test('KubeHttp hands every answer’s warnings to onWarning, refusals included', async (t) => {
  const server = createServer((req, res) => {
    res.setHeader('Content-Type', 'application/json')
    res.setHeader('Warning', ['299 - "first"', '299 - "second"'])
    if (req.url?.startsWith('/denied')) {
      res.statusCode = 403
      res.end(JSON.stringify({ kind: 'Status', code: 403, message: 'denied' }))
    } else res.end('{}')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => server.close())
  const port = (server.address() as AddressInfo).port
  const seen: string[] = []
  const kubeconfig = {
    exportConfig: () =>
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [{ name: 'c', cluster: { server: `http://127.0.0.1:${port}` } }],
        users: [{ name: 'u', user: { token: 't' } }],
        contexts: [{ name: 'x', context: { cluster: 'c', user: 'u' } }],
        'current-context': 'x',
      }),
  }
  const http = new KubeHttp(kubeconfig, { onWarning: (text) => seen.push(text) })
  t.teardown(() => http.close())
  await http.request({ method: 'GET', path: '/ok' })
  await t.rejects(http.request({ method: 'PATCH', path: '/denied', body: {} }))
  t.same(seen, ['first', 'second', 'first', 'second'], 'each answer, whatever its status (the printer dedups)')
})
