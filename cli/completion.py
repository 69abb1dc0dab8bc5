"""`bashgym completion bash|zsh|fish`: a shell's completion script. Each script asks the hidden
`bashgym __complete <shell> <index> -- <words...>` for candidates (cli/completion_walk.py), so completion always
matches the installed commands: names and options from the parser, project, run and campaign ids from the daemon."""

from __future__ import annotations

import argparse
import sys

from bashgym.cli.completion_walk import SHELLS
from bashgym.cli.registry import Ctx, command
from bashgym.client.errors import EXIT_OK

# -- the scripts -----------------------------------------------------------------------------------------

BASH = r"""# bashgym completion for bash. Install: add this line to ~/.bashrc
#   eval "$(bashgym completion bash)"
_bashgym() {
    local prog="${COMP_WORDS[0]/#\~/$HOME}" line
    local -a answer=()
    while IFS= read -r line; do
        answer+=("$line")
    done < <("$prog" __complete bash "$COMP_CWORD" -- "${COMP_WORDS[@]}" 2>/dev/null)
    COMPREPLY=()
    if [[ "${answer[0]}" == __files__ ]]; then
        compopt -o filenames 2>/dev/null
        while IFS= read -r line; do
            COMPREPLY+=("$line")
        done < <(compgen -f -- "${COMP_WORDS[COMP_CWORD]}")
        return 0
    fi
    COMPREPLY=("${answer[@]}")
}
complete -F _bashgym bashgym
"""

ZSH = r"""#compdef bashgym
# bashgym completion for zsh. Install: add this line to ~/.zshrc (it runs compinit when that has not run)
#   source <(bashgym completion zsh)
_bashgym() {
    local prog="${words[1]/#\~/$HOME}" line
    local -a answer
    while IFS= read -r line; do
        answer+=("$line")
    done < <("$prog" __complete zsh $((CURRENT - 1)) -- "${words[@]}" 2>/dev/null)
    if [[ "${answer[1]}" == __files__ ]]; then
        compset -P '--*='
        _files
        return
    fi
    (( ${#answer} )) && _describe -t bashgym bashgym answer
}
if (( ! $+functions[compdef] )); then
    autoload -Uz compinit && compinit
fi
compdef _bashgym bashgym
"""

FISH = r"""# bashgym completion for fish. Install:
#   bashgym completion fish > ~/.config/fish/completions/bashgym.fish
function __bashgym_complete
    set -l before (commandline -opc)
    set -l cur (commandline -ct)
    set -l answer ($before[1] __complete fish (count $before) -- $before "$cur" 2>/dev/null)
    if test "$answer[1]" = __files__
        set -l lead (string match -r -- '^--[^=]*=' "$cur")
        __fish_complete_path (string replace -r -- '^--[^=]*=' '' "$cur") | string replace -r -- '^' "$lead"
        return
    end
    for candidate in $answer
        printf '%s\n' $candidate
    end
end
complete -c bashgym -f -a '(__bashgym_complete)'
"""

SCRIPTS = {"bash": BASH, "zsh": ZSH, "fish": FISH}


def _shell_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=SHELLS, help="the shell the script is for")


@command("completion", help="print a shell completion script: bash, zsh or fish (see docs/cli.md)")(_shell_arg)
async def completion_script(ctx: Ctx) -> int:
    sys.stdout.write(SCRIPTS[ctx.args.shell])
    return EXIT_OK
