/** The lossless report on a terminal, the same in `migrate`, its dry runs, `plan` and `check`: summary, each changing field, the flags that accept. */
import { describeChange, describeFindings, type ChangeCount, type LosslessReport } from './verdict.js'
import { acceptHint, acceptUncheckedHint } from './check.js'

const VERDICT_WORDS: Record<ChangeCount['verdict'], string> = {
  refused: 'refused',
  accepted: 'accepted',
  bookkeeping: 'bookkeeping (round-trip data, not stored)',
  default: 'schema default',
}

/** "spec.timeouts.pipeline moved from spec.timeout", "spec.token removed (set by a manager, not in what the rewrite keeps)". */
const describeChangeCount = (c: ChangeCount): string => describeChange(c.pattern, c)

/** The lines of a report, indented by `indent`; `crdName` for the accept line. */
export function losslessLines(crdName: string, l: LosslessReport, indent = '  '): string[] {
  const extras = [
    l.accepted ? `${l.accepted} with accepted changes` : '',
    l.defaultsAdded ? `${l.defaultsAdded} gaining schema defaults` : '',
    l.bookkeeping ? `${l.bookkeeping} with round-trip bookkeeping the rewrite does not store` : '',
    l.unchecked ? `${l.unchecked} could not be checked${l.uncheckedAccepted ? ' (accepted)' : ''}` : '',
    l.refused ? `${l.refused} refused by the conversion webhook` : '',
    l.complete ? '' : 'first page only',
  ].filter(Boolean)
  const views = [...l.through, ...l.unserved.map((v) => `managedFields of objects stored in unserved ${v}`)]
  const method = l.method === 'list' ? 'storage-version list view' : 'dry-run round trip'
  const lines = [
    `${indent}lossless check (${method} through ${views.join(', ') || 'no old version'}): ${l.checked} checked, ${l.lossy} would change${extras.length ? `, ${extras.join(', ')}` : ''}${l.storageViews ? `; ${l.storageViews} read again through the storage version` : ''}`,
  ]
  const width = Math.max(0, ...l.changes.map((c) => describeChangeCount(c).length))
  for (const c of l.changes)
    lines.push(
      `${indent}  ${describeChangeCount(c).padEnd(width)}  ${String(c.objects).padStart(6)} object(s)  ${VERDICT_WORDS[c.verdict]}`,
    )
  const consent = l.crdConsent
  if (consent && (consent.acceptChanges.length || consent.acceptUnchecked))
    lines.push(
      `${indent}consent from the CRD's annotations: ${[...consent.acceptChanges, ...(consent.acceptUnchecked ? ['unchecked objects'] : [])].join(', ')}`,
    )
  if (consent?.ignored.length)
    lines.push(`${indent}ignored (not field paths) in the CRD's accept-changes annotation: ${consent.ignored.join(', ')}`)
  // Names and full paths: the CLI's reader ran it with their own credentials (the CRD's record says counts only).
  if (l.lossy > 0) lines.push(`${indent}objects: ${describeFindings(l.findings, l.lossy)}`)
  if (l.lossy > 0) lines.push(`${indent}accept on purpose with: ${acceptHint(crdName, l.changes)}`)
  if (l.unchecked > 0 && !l.uncheckedAccepted) {
    lines.push(`${indent}${l.uncheckedReason ?? `${l.unchecked} object(s) could not be checked`}`)
    lines.push(`${indent}accept them unchecked on purpose with: ${acceptUncheckedHint(crdName)}`)
  }
  return lines
}
