/**
 * `migrate` in a pipe (CI, ssh, `| tee`), issue #36 item 1: a line when each CRD starts and
 * ends, and a progress line per CRD in flight every --progress-every seconds, printed while
 * the run goes on (not at its end); two CRDs at once: migrate-progress-tty.test.ts. The counts of the summary,
 * its detail line and the last-counts annotation agree; a run that leaves managedFields
 * entries of a still-served version says the next step, and that step works.
 */
import t from 'tap'
import { getCrd } from '../../src/kube/crds.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { CliRun, type TimedLine } from '../helpers/cli-run.js'
import { httpFor, setStorageVersion } from '../helpers/cluster.js'
import { getControlPlane } from '../helpers/controlplane.js'
import { crdWithObjects } from '../helpers/fixtures.js'

const N = 1000

/** `NAME: PHASE done/total (p%), rate objects/s, ETA x`: the periodic line. */
function progressLines(lines: TimedLine[], name: string): Array<TimedLine & { phase: string; done: number; total: number }> {
  const re = new RegExp(`^${name.replace(/\./g, '\\.')}: (\\w+) (\\d+)/(\\d+) \\(\\d+%\\), (?:[\\d.]+|-) objects/s, ETA (?:\\S+)$`)
  return lines.flatMap((l) => {
    const m = re.exec(l.text)
    return m ? [{ ...l, phase: m[1]!, done: Number(m[2]), total: Number(m[3]) }] : []
  })
}

const lineAt = (lines: TimedLine[], re: RegExp) => lines.find((l) => re.test(l.text))

t.test(`in a pipe: progress lines while ${N} objects are migrated, for one CRD`, async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const a = await crdWithObjects(http, { prefix: 'progress', count: N })
  const migrate = (names: string[], ...flags: string[]) =>
    new CliRun(['migrate', ...names, '--kubeconfig', cp.kubeconfigPath, '--progress-every', '1', '--concurrency', '8', ...flags])

  await t.test('one CRD', async (t) => {
    const run = migrate([a.name])
    const exit = await run.exited
    t.equal(exit.code, 0, 'exit 0', { stderr: run.stderr, stdout: run.stdout })
    const started = lineAt(run.stderrLines, new RegExp(`^${a.name}: started$`))
    const finished = lineAt(
      run.stderrLines,
      new RegExp(`^${a.name}: Succeeded in \\S+: StorageVersionMigration ${N}/${N} objects, .*; freeze lifted$`),
    )
    t.ok(started, 'a line when it starts', { stderr: run.stderr })
    t.ok(finished, 'a line when it ends: outcome, time, each phase n/total, freeze lifted', { stderr: run.stderr })
    const during = progressLines(run.stderrLines, a.name).filter((l) => l.phase === 'StorageVersionMigration' && l.done < l.total)
    t.ok(during.length >= 2, `progress lines during the storage phase (${during.length})`, { stderr: run.stderr })
    t.ok(
      during.every((l) => l.at < finished!.at && l.total === N),
      'printed before the CRD ended, each with the total',
    )
    t.ok(
      during.some((l) => l.done > 0),
      'with objects done',
    )

    // The summary's words, its detail line and the annotation: the same numbers.
    const reason = new RegExp(`(\\d+) of ${N} object\\(s\\) rewritten in v2, (\\d+) already current, storedVersions \\["v2"\\]`).exec(
      run.stdout,
    )
    const detail = new RegExp(`storage version v2: ${N} listed, (\\d+) rewritten, (\\d+) already current, 0 written by others`).exec(
      run.stdout,
    )
    const annotations = (await getCrd(http, a.name)).metadata.annotations ?? {}
    const counts = /^rewritten=(\d+) alreadyCurrent=(\d+) /.exec(annotations[StateAnnotation.lastCounts] ?? '')
    t.ok(reason && detail && counts, 'summary, detail and last-counts all give their counts', { stdout: run.stdout, annotations })
    if (!reason || !detail || !counts) return
    t.same([reason[1], reason[2]], [detail[1], detail[2]], 'the summary and its detail line agree')
    t.same([reason[1], reason[2]], [counts[1], counts[2]], 'and last-counts says the same')
    t.equal(Number(reason[1]) + Number(reason[2]), N, 'every object counted once')

    // v1 is still served: cleanup leaves its entries, and says what to do.
    const next = new RegExp(
      `next: ${N} objects keep ${N} managedFields entries of v1, which is still served \\(left by design; check --drop v1 counts them\\): to drop v1, set served: false on it, then run migrate again`,
    )
    t.match(run.stdout, next, 'the next step, in one line')
    await setStorageVersion(http, a.name, 'v2', ['v1'])
    const again = migrate([a.name], '-o', 'json')
    const exit2 = await again.exited
    t.equal(exit2.code, 0, 'the next step: migrate again once v1 is unserved', { stderr: again.stderr })
    const [result] = JSON.parse(again.stdout) as Array<{
      outcome: string
      cleanup?: { entriesRemoved: number; entriesRelabelled?: number; servedEntriesKept?: unknown }
    }>
    t.equal(result?.outcome, 'Succeeded')
    t.equal((result?.cleanup?.entriesRemoved ?? 0) + (result?.cleanup?.entriesRelabelled ?? 0), N, 'every v1 entry is dealt with')
    t.notOk(result?.cleanup?.servedEntriesKept, 'and nothing is left for a next step')
    t.notMatch(again.stdout, /next:/)
  })
})
