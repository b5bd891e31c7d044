/**
 * `completion bash|zsh|fish`: a thin script asking `__complete` (completion-output.ts) what
 * fits, as cobra's scripts do; it knows no command or flag, so Tab offers whatever the installed
 * version does. Directives acted on: 4 no file names, 32 keep the order, 0 file names.
 */
import { PROGRAM_NAME } from '../program-name.js'

export const SHELLS = ['bash', 'zsh', 'fish'] as const
type Shell = (typeof SHELLS)[number]

/** A shell function name from the program's: crd-migrator -> _crd_migrator. */
const functionName = (name: string): string => `_${name.replace(/[^A-Za-z0-9_]/g, '_')}`

const SCRIPTS: Readonly<Record<Shell, (name: string) => string>> = { bash: bashScript, zsh: zshScript, fish: fishScript }

export function completionScript(shell: Shell, name: string = PROGRAM_NAME): string {
  return SCRIPTS[shell](name)
}

function bashScript(name: string): string {
  const fn = functionName(name)
  return `# ${name} completion for bash: source <(${name} completion bash)
# Asks \`${name} __complete WORD...\` for the candidates of the word at the cursor.
${fn}() {
  local words=() cur piece line w i joined
  COMPREPLY=()
  # bash splits --context=x and a:b at COMP_WORDBREAKS; the program wants the words as typed,
  # so pieces with no space between them are joined again (COMP_LINE tells where spaces are).
  if [[ -n \${COMP_LINE+set} && -n \${COMP_POINT+set} ]]; then
    line=\${COMP_LINE:0:COMP_POINT}
    for ((i = 0; i <= COMP_CWORD; i++)); do
      joined=1
      if [[ $line =~ ^[[:space:]]+ ]]; then
        line=\${line:\${#BASH_REMATCH[0]}}
        joined=0
      fi
      w=\${COMP_WORDS[i]}
      # The word at the cursor: only what is before the cursor.
      ((i == COMP_CWORD)) && w=$line
      if [[ $line != "$w"* ]]; then
        words=("\${COMP_WORDS[@]:0:COMP_CWORD+1}")
        piece=\${COMP_WORDS[COMP_CWORD]}
        break
      fi
      line=\${line:\${#w}}
      piece=$w
      if ((i > 1 && joined)); then words[\${#words[@]}-1]+=$w; else words+=("$w"); fi
    done
  else
    words=("\${COMP_WORDS[@]:0:COMP_CWORD+1}")
    piece=\${COMP_WORDS[COMP_CWORD]}
  fi
  cur=\${words[\${#words[@]}-1]}
  # Right after a word break (--context=|), bash replaces nothing: the candidates follow it.
  [[ $piece =~ ^[=:]+$ ]] && piece=
  local prog=\${words[0]} out directive keep prefix= c
  [[ $prog == '~/'* ]] && prog=$HOME/\${prog:2}
  out=$("$prog" __complete "\${words[@]:1}" 2>/dev/null </dev/null) || return 0
  directive=\${out##*$'\\n'}
  directive=\${directive#:}
  [[ $directive =~ ^[0-9]+$ ]] || return 0
  if [[ $out == *$'\\n'* ]]; then out=\${out%$'\\n'*}; else out=; fi
  # The answer to --flag=x is the value alone; bash replaces what follows its last word break.
  [[ $cur == -*=* ]] && prefix=\${cur%%=*}=
  keep=\${cur:0:\${#cur}-\${#piece}}
  if [[ -n $out ]]; then
    while IFS= read -r c; do
      c=$prefix\${c%%$'\\t'*}
      [[ $c == "$keep"* ]] && COMPREPLY+=("\${c:\${#keep}}")
    done <<<"$out"
  fi
  ((directive & 2)) && compopt -o nospace 2>/dev/null
  ((directive & 32)) && compopt -o nosort 2>/dev/null
  # Nothing fits and file names would not either: no fallback to them.
  ((directive & 4)) && ((\${#COMPREPLY[@]} == 0)) && compopt +o default 2>/dev/null
  return 0
}
# -o default: file names when the program offers nothing and says they fit (--kubeconfig, --manifests).
complete -o default -F ${fn} ${name}
`
}

function zshScript(name: string): string {
  const fn = functionName(name)
  return `#compdef ${name}
# ${name} completion for zsh: source <(${name} completion zsh) after compinit, or save it as _${name} in your $fpath
# Asks \`${name} __complete WORD...\` for the candidates of the word at the cursor.
${fn}() {
  local cur=\${words[CURRENT]} out directive prefix= line value description keep=
  local -a lines candidates nospace
  out=$(\${~words[1]} __complete "\${(@)words[2,CURRENT]}" 2>/dev/null </dev/null) || return 1
  lines=("\${(@f)out}")
  directive=\${lines[-1]#:}
  [[ $directive == <-> ]] || return 1
  lines=("\${(@)lines[1,-2]}")
  # The answer to --flag=x is the value alone.
  [[ $cur == -*=* ]] && prefix=\${cur%%=*}=
  for line in $lines; do
    [[ -z $line ]] && continue
    value=\${line%%$'\\t'*}
    description=
    [[ $line == *$'\\t'* ]] && description=\${line#*$'\\t'}
    # _describe reads value:description, so a colon in the value is escaped.
    candidates+=("\${prefix}\${value//:/\\\\:}\${description:+:$description}")
  done
  (( directive & 32 )) && keep=-V
  (( directive & 2 )) && nospace=(-S '')
  if (( \${#candidates} > 0 )); then
    _describe $keep 'values' candidates "\${(@)nospace}"
  elif (( ! (directive & 4) )); then
    [[ $cur == -*=* ]] && compset -P '*='
    _files
  else
    return 1
  fi
}
if [ "$funcstack[1]" = "${fn}" ]; then ${fn} "$@"; else compdef ${fn} ${name}; fi
`
}

function fishScript(name: string): string {
  const fn = `__${functionName(name).slice(1)}_complete`
  return `# ${name} completion for fish: ${name} completion fish | source, or save it as ~/.config/fish/completions/${name}.fish
# Asks \`${name} __complete WORD...\` for the candidates of the word at the cursor.
function ${fn}
    set -l args (commandline -opc)
    set -l cur (commandline -ct)
    set -l out ($args[1] __complete $args[2..-1] $cur 2>/dev/null </dev/null)
    or return
    set -l directive (string replace -r -- '^:' '' $out[-1])
    string match -qr -- '^[0-9]+$' $directive; or return
    set -e out[-1]
    # The answer to --flag=x is the value alone; fish replaces the whole token.
    set -l prefix (string match -r -- '^-[^=]*=' $cur)
    for c in $out
        printf '%s%s\\n' "$prefix" $c
    end
    if test (count $out) -eq 0; and test (math "bitand($directive, 4)") -eq 0
        for p in (__fish_complete_path (string replace -r -- '^-[^=]*=' '' $cur))
            printf '%s%s\\n' "$prefix" $p
        end
    end
end
complete -c ${name} -e
# -f: file names only when the program says they fit; -k: its order (managed CRDs first).
complete -c ${name} -f -k -a '(${fn})'
`
}
