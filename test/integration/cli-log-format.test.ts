/**
 * `--log-format` of the built CLI, against the real API server: `migrate` at --log-level
 * info logs its run to stderr as text lines, with --log-format text and with no flag even
 * though stderr is a pipe here (kubectl's stderr is text in a pipe too), and as pino's
 * JSON lines only with --log-format json (issue 46, item 3).
 */
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import t from 'tap'
import { createCrd, crdManifest, deleteCrd, httpFor } from '../helpers/cluster.js'
import { getControlPlane, uniqueGroup } from '../helpers/controlplane.js'

const run = promisify(execFile)

const TEXT_LINE = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (TRACE|DEBUG|INFO |WARN |ERROR|FATAL) \S/

t.test('migrate logs text lines with --log-format text or no flag (stderr a pipe), JSON lines with json only', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const crd = crdManifest({ group: uniqueGroup('logfmt'), versions: ['v1'], storage: 'v1' })
  await createCrd(http, crd)
  t.teardown(() => deleteCrd(http, crd.metadata.name))

  // The log alone: progress lines, which share stderr, are off (test/integration/migrate-progress.test.ts has them).
  const stderrOf = async (...flags: string[]) => {
    const args = [
      ...['dist/cli/main.js', 'migrate', crd.metadata.name, '--kubeconfig', cp.kubeconfigPath],
      ...['--log-level', 'info', '-o', 'json', '--progress-every', '0'],
    ]
    const { stderr } = await run(process.execPath, [...args, ...flags], { cwd: process.cwd() })
    return stderr.split('\n').filter(Boolean)
  }

  for (const flags of [['--log-format', 'text'], []]) {
    const text = await stderrOf(...flags)
    t.ok(text.length > 0, `${flags.join(' ') || 'no flag'}: migrate logged something`, { stderr: text })
    t.comment(text.join('\n'))
    t.same(
      text.filter((l) => !TEXT_LINE.test(l)),
      [],
      'every line is `time LEVEL message ...`',
      { stderr: text },
    )
    t.ok(
      text.some((l) => l.includes(` INFO  migration `) && l.includes(`crd=${crd.metadata.name}`)),
      'the migration is told, its CRD as key=value',
      { stderr: text },
    )
    t.notOk(
      text.some((l) => l.trimStart().startsWith('{')),
      'no JSON',
    )
  }

  for (const flags of [['--log-format', 'json']]) {
    const json = await stderrOf(...flags)
    t.ok(json.length > 0, `${flags.join(' ') || 'no flag'}: migrate logged something`)
    const entries = json.map((l) => JSON.parse(l) as { level: number; msg: string; name: string })
    t.ok(
      entries.every((e) => typeof e.level === 'number' && typeof e.msg === 'string' && e.name === 'crd-migrator'),
      `${flags.join(' ') || 'no flag (stderr is a pipe)'}: every line is a pino JSON object`,
      { stderr: json },
    )
  }
})
