/**
 * `migrate` of two CRDs at once (issue #36 item 1): in a pipe, a start line, periodic
 * progress lines and an end line for each; on a terminal (a pseudo-terminal made by
 * util-linux `script`), a live line per CRD in flight, both redrawn in place together,
 * and a permanent end line for each.
 */
import t from 'tap'
import { CliRun, type TimedLine } from '../helpers/cli-run.js'
import { httpFor, setStorageVersion } from '../helpers/cluster.js'
import { getControlPlane } from '../helpers/controlplane.js'
import { crdWithObjects } from '../helpers/fixtures.js'

const N = 500
const ESC = '\x1b'

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')

/** `NAME: PHASE done/total (p%), rate objects/s, ETA x`: the periodic line off a terminal. */
function progressLines(lines: TimedLine[], name: string): Array<TimedLine & { done: number; total: number }> {
  const re = new RegExp(`^${escape(name)}: (\\w+) (\\d+)/(\\d+) \\(\\d+%\\), (?:[\\d.]+|-) objects/s, ETA (?:\\S+)$`)
  return lines.flatMap((l) => {
    const m = re.exec(l.text)
    return m ? [{ ...l, done: Number(m[2]), total: Number(m[3]) }] : []
  })
}

const lineAt = (lines: TimedLine[], re: RegExp) => lines.find((l) => re.test(l.text))

/** A shell word. */
const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`

t.test(`two CRDs of ${N} objects at once: in a pipe, then on a terminal`, async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const [a, b] = await Promise.all([
    crdWithObjects(http, { prefix: 'progress', count: N }),
    crdWithObjects(http, { prefix: 'progress', count: N }),
  ])
  const args = (...flags: string[]) => ['migrate', a.name, b.name, '--kubeconfig', cp.kubeconfigPath, '--max-parallel-crds', '2', ...flags]

  await t.test('in a pipe', async (t) => {
    const run = new CliRun(args('--progress-every', '1'))
    const exit = await run.exited
    t.equal(exit.code, 0, 'exit 0', { stderr: run.stderr, stdout: run.stdout })
    for (const name of [a.name, b.name]) {
      const finished = lineAt(
        run.stderrLines,
        new RegExp(`^${escape(name)}: Succeeded in \\S+: StorageVersionMigration ${N}/${N}.*; freeze lifted$`),
      )
      t.ok(lineAt(run.stderrLines, new RegExp(`^${escape(name)}: started$`)), `${name}: its start line`)
      t.ok(finished, `${name}: its end line`, { stderr: run.stderr })
      const during = progressLines(run.stderrLines, name).filter((l) => l.done < l.total && l.at < finished!.at)
      t.ok(during.length >= 1, `${name}: progress lines while it ran (${during.length})`, { stderr: run.stderr })
      t.match(run.stdout, new RegExp(`${escape(name)}: Succeeded in .* of ${N} object\\(s\\) rewritten in v2`), `${name}: its summary`)
    }
    // Both in flight at once: one period's write has a line for each.
    const ticks = new Map<number, Set<string>>()
    for (const name of [a.name, b.name])
      for (const l of progressLines(run.stderrLines, name)) ticks.set(l.at, (ticks.get(l.at) ?? new Set()).add(name))
    t.ok(
      [...ticks.values()].some((names) => names.size === 2),
      'a progress period with a line for each CRD in flight',
    )
  })

  await t.test('on a terminal', async (t) => {
    // Both back to storage v1: every object is stored at v2 now, so each is migrated again.
    await Promise.all([setStorageVersion(http, a.name, 'v1'), setStorageVersion(http, b.name, 'v1')])
    const command = [process.execPath, 'dist/cli/main.js', ...args()].map(quote).join(' ')
    // stdout and stderr are both the terminal; `script` copies it to its own stdout.
    const run = new CliRun(['-qfec', `stty cols 200; exec ${command}`, '/dev/null'], { command: 'script' })
    const exit = await run.exited
    const screen = run.stdout
    t.equal(exit.code, 0, 'exit 0', { screen })
    // Numbers first: `1744/4000  43%  174/s  ETA 13s  <crd>  StorageVersionMigration  [####----]`.
    const live = (name: string) =>
      new RegExp(`(\\d+)/${N}  \\d+%  \\S+/s  ETA \\S+  ${escape(name)}  StorageVersionMigration  \\[[#-]{20}\\]`)
    // A redraw: the cursor goes up over the live lines, erases them and draws them anew.
    const redraws = screen.split(new RegExp(`${ESC}\\[\\d+F${ESC}\\[J`))
    const both = redraws.filter((r) => {
      const ma = live(a.name).exec(r)
      const mb = live(b.name).exec(r)
      return ma && mb && Number(ma[1]) < N && Number(mb[1]) < N
    })
    t.ok(both.length >= 2, `redraws with a live line for each CRD mid-run (${both.length} of ${redraws.length})`, {
      screen: screen.slice(-3000),
    })
    for (const name of [a.name, b.name]) {
      t.match(
        screen,
        new RegExp(`${escape(name)}: Succeeded in \\S+: StorageVersionMigration ${N}/${N}.*; freeze lifted\\r?\\n`),
        `${name}: its end line stays`,
      )
      t.match(screen, new RegExp(`of ${N} object\\(s\\) rewritten in v1`), 'and its summary')
    }
    t.notMatch(screen, /objects\/s, ETA/, 'no periodic plain lines on a terminal')
    // The last thing on the screen is no live line: the area is cleared at the end.
    const tail = screen.slice(screen.lastIndexOf('\x1b[J') + 3)
    t.notMatch(tail, /StorageVersionMigration {2}\[/, 'the live lines are gone when it ends')
  })
})
