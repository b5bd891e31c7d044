import { pino } from 'pino'
import t from 'tap'
import { formatLogLine, formatValue } from '../../src/log-text.js'
import { pinoOptions, resolveLogFormat } from '../../src/log.js'
import { configFromOptions } from '../../src/cli/command-kit.js'
import { ConfigError } from '../../src/errors.js'

/** The JSON lines a real pino logger writes for `log`, each formatted as text. */
function textOf(log: (logger: pino.Logger) => void, level = 'trace'): string[] {
  const lines: string[] = []
  const logger = pino(
    { level, base: { pid: 42, hostname: 'h', name: 'crd-migrator' } },
    { write: (s: string) => lines.push(formatLogLine(s)) },
  )
  log(logger)
  return lines
}

t.test('a value after key=: bare when unambiguous, JSON otherwise', async (t) => {
  const cases: [unknown, string][] = [
    ['widgets.example.com', 'widgets.example.com'],
    ['two words', '"two words"'],
    ['', '""'],
    ['a=b', '"a=b"'],
    ['say "hi"', '"say \\"hi\\""'],
    ['line\nbreak', '"line\\nbreak"'],
    [3000, '3000'],
    [0.5, '0.5'],
    [true, 'true'],
    [null, 'null'],
    [['v1', 'v2'], '["v1","v2"]'],
    [{ seen: 3, failed: 0 }, '{"seen":3,"failed":0}'],
    // Nothing reaches a terminal raw: a value with escapes or invisible characters is JSON, escaped.
    ['\u001b]0;pwned\u0007', '"\\u001b]0;pwned\\u0007"'],
    ['\u009b2J', '"\\u009b2J"'],
    ['a\u202eb', '"a\\u202eb"'],
    ['del\u007f', '"del\\u007f"'],
    [{ detail: '\u009b2J' }, '{"detail":"\\u009b2J"}'],
  ]
  for (const [value, text] of cases) t.equal(formatValue(value), text, JSON.stringify(value))
  // (Not named by its JSON: a raw U+2028 in a test's name breaks TAP's own lines.)
  t.equal(formatValue({ detail: 'a\u2028b' }), '{"detail":"a\\u2028b"}', 'a line separator in an object')
})

t.test('time, level, message, then the fields in their order; pid, hostname and name left out', async (t) => {
  const line = formatLogLine(
    JSON.stringify({
      level: 40,
      time: Date.UTC(2026, 10, 25, 23, 50, 31, 36),
      pid: 1,
      hostname: 'vm',
      name: 'crd-migrator',
      component: 'migrator',
      crd: 'widgets.demo.crd-migrator.io',
      reason: 'no API server is listed',
      msg: 'checking the storage version on one API server only',
    }),
  )
  t.equal(
    line,
    '2026-11-25T23:50:31.036Z WARN  checking the storage version on one API server only component=migrator crd=widgets.demo.crd-migrator.io reason="no API server is listed"\n',
  )
})

t.test('a message or stack that quotes a webhook reaches the terminal without escapes or extra lines', async (t) => {
  const said = 'refused\n2026-01-01T00:00:00.000Z INFO  all good\u001b]0;pwned\u0007\u001b[2J'
  const lines = textOf((l) => {
    l.info(said)
    l.error({ err: new Error(said) }, 'failed')
  })
  t.match(lines[0], /^\S+ INFO {2}refused 2026-01-01T00:00:00\.000Z INFO {2}all good\n$/, 'one line, the escapes gone')
  t.notMatch(lines.join('').replaceAll('\n', ''), /\p{Cc}/u, 'no ESC, no BEL, no other control character')
  t.equal(lines[1]!.split('\n').filter((l) => /^\S/.test(l)).length, 1, 'one line starts at the margin; the stack is indented')
})

t.test('every pino level by name, from a real logger', async (t) => {
  const lines = textOf((l) => {
    l.trace('t')
    l.debug('d')
    l.info('i')
    l.warn('w')
    l.error('e')
    l.fatal('f')
  })
  t.same(
    lines.map((l) => l.split(' ').slice(1).filter(Boolean)),
    [
      ['TRACE', 't\n'],
      ['DEBUG', 'd\n'],
      ['INFO', 'i\n'],
      ['WARN', 'w\n'],
      ['ERROR', 'e\n'],
      ['FATAL', 'f\n'],
    ],
  )
  for (const line of lines) t.match(line, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z [A-Z]+ +\w/, 'starts with an ISO time')
})

t.test('child bindings and fields, one line each', async (t) => {
  const [line] = textOf((l) => l.child({ component: 'webhook' }).info({ port: 9443, hosts: ['a', 'b'] }, 'listening'))
  t.match(line, / INFO {2}listening component=webhook port=9443 hosts=\["a","b"\]\n$/)
  t.equal(line!.split('\n').length, 2, 'one line')
})

t.test('an error: its message and code on the line; its stack below at level error and above only', async (t) => {
  const err = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6443'), { code: 'ECONNREFUSED' })
  const [warn] = textOf((l) => l.warn({ err }, 'lease request failed'))
  t.match(warn, / WARN {2}lease request failed err="connect ECONNREFUSED 127.0.0.1:6443" err.code=ECONNREFUSED\n$/)
  t.equal(warn!.split('\n').length, 2, 'a warning stays one line')
  const [error] = textOf((l) => l.error({ err }, 'crashed'))
  const [first, ...stack] = error!.trimEnd().split('\n')
  t.match(first, / ERROR crashed err="connect ECONNREFUSED 127.0.0.1:6443" err.code=ECONNREFUSED$/)
  t.match(stack[0], /^ {4}Error: connect ECONNREFUSED/, 'the stack follows, indented')
  t.ok(
    stack.slice(1).every((l) => l.startsWith('    at ')),
    'each frame indented',
  )
})

t.test('a message-less entry, and lines that are not JSON objects, pass through', async (t) => {
  t.equal(formatLogLine('{"level":30,"time":0,"a":1}'), '1970-01-01T00:00:00.000Z INFO  a=1\n')
  t.equal(formatLogLine('not json'), 'not json\n')
  t.equal(formatLogLine('[1,2]\n'), '[1,2]\n')
})

t.test('the format: as asked, else text on a terminal and JSON elsewhere', async (t) => {
  t.equal(resolveLogFormat(undefined, true), 'text')
  t.equal(resolveLogFormat(undefined, false), 'json')
  t.equal(resolveLogFormat('json', true), 'json')
  t.equal(resolveLogFormat('text', false), 'text')
})

t.test('--log-format and CRD_MIGRATOR_LOG_FORMAT reach the config; anything else is refused', async (t) => {
  t.equal(configFromOptions({ logFormat: 'text' }, {}).logFormat, 'text')
  t.equal(configFromOptions({}, { CRD_MIGRATOR_LOG_FORMAT: 'json' }).logFormat, 'json')
  t.equal(configFromOptions({}, {}).logFormat, undefined, 'unset: decided by the terminal')
  t.throws(() => configFromOptions({ logFormat: 'pretty' }, {}), ConfigError)
})

t.test(
  'JSON lines: invisible characters written as \\u escapes, the line still JSON with the same values (issue 44, item 3)',
  async (t) => {
    const lines: string[] = []
    const logger = pino(pinoOptions('info'), { write: (s: string) => lines.push(s) })
    // What a StorageVersionMigration's creator can write in its spec, quoted by the controller.
    const hostile = 'widgets\u001b]0;pwned\u0007\u009b2J\u0085\u2028\u2029\u202eexe.\u007f\u200b\u{e0001}'
    logger.warn({ svm: hostile, nested: { resource: hostile } }, `cannot migrate ${hostile}`)
    logger.child({ svm: hostile }).info('a child logger too')
    t.equal(lines.length, 2)
    // eslint-disable-next-line no-control-regex -- control characters are what it looks for
    const raw = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u2028\u2029\p{Cf}]/u
    for (const line of lines) {
      t.notOk(raw.test(line), 'no control, separator or format character raw in the line')
      t.ok(line.endsWith('\n'), 'one line')
      t.equal(line.indexOf('\n'), line.length - 1, 'no line break but the last')
    }
    const [first, second] = lines.map((l) => JSON.parse(l) as Record<string, unknown>)
    t.equal(first!['msg'], `cannot migrate ${hostile}`, 'the message parses back to every character')
    t.equal(first!['svm'], hostile)
    t.same(first!['nested'], { resource: hostile })
    t.equal(second!['svm'], hostile)
    t.match(lines[0], /\\u009b2J\\u0085\\u2028\\u2029\\u202eexe\.\\u007f\\u200b\\udb40\\udc01/, 'each as its \\u escape')
    t.equal(formatLogLine(lines[0]!).includes('\u202e'), false, 'the text format of an escaped line is clean too')
    const plain: string[] = []
    pino(pinoOptions('info'), { write: (s: string) => plain.push(s) }).info({ crd: 'widgets.example.com' }, 'überprüft ✓')
    t.match(plain[0], /"msg":"überprüft ✓"/, 'visible non-ASCII kept as it is')
  },
)
