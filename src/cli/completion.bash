# bash completion for floodgate (the command-line tool of libfloodgate).
# Installed as share/bash-completion/completions/floodgate; or: source it.
# Completes commands, subcommands, the options each takes, algorithm names
# after check and peek, and files after policy apply.

_floodgate() {
    local cur prev cmd sub opts
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
    cmd=${COMP_WORDS[1]}
    sub=${COMP_WORDS[2]}

    case $prev in
    --url) COMPREPLY=($(compgen -W "redis:// unix:// redis+cluster:// mem:" -- "$cur")); return ;;
    --out) COMPREPLY=($(compgen -d -- "$cur")); return ;;
    --last) COMPREPLY=($(compgen -W "60s 60m 24h 7d" -- "$cur")); return ;;
    esac

    if [[ $COMP_CWORD -eq 1 ]]; then
        COMPREPLY=($(compgen -W "check peek inspect reset lock semaphore bloom distinct
            policy doctor functions simulate version help --help --version" -- "$cur"))
        return
    fi

    case $cmd in
    lock)      [[ $COMP_CWORD -eq 2 ]] && COMPREPLY=($(compgen -W "take release extend info" -- "$cur")) && return ;;
    semaphore) [[ $COMP_CWORD -eq 2 ]] && COMPREPLY=($(compgen -W "acquire release" -- "$cur")) && return ;;
    bloom)     [[ $COMP_CWORD -eq 2 ]] && COMPREPLY=($(compgen -W "reserve add exists card" -- "$cur")) && return ;;
    distinct)  [[ $COMP_CWORD -eq 2 ]] && COMPREPLY=($(compgen -W "add count" -- "$cur")) && return ;;
    policy)    [[ $COMP_CWORD -eq 2 ]] && COMPREPLY=($(compgen -W "apply list show check delete" -- "$cur")) && return ;;
    functions) [[ $COMP_CWORD -eq 2 ]] && COMPREPLY=($(compgen -W "load show" -- "$cur")) && return ;;
    esac

    case "$cmd $sub" in
    "check "* | "peek "*)   opts="--cost" ;;
    "lock take")            opts="--owner --lease --wait --shared --reentrant" ;;
    "lock release")         opts="--owner" ;;
    "lock extend")          opts="--owner --lease" ;;
    "semaphore acquire")    opts="--permits --owner --lease --wait" ;;
    "semaphore release")    opts="--owner --permits" ;;
    "bloom reserve")        opts="--error --capacity --expansion" ;;
    "distinct add")         opts="--at" ;;
    "distinct count")       opts="--last --from --to" ;;
    "policy apply")         opts="--dry-run" ;;
    "policy check")         opts="--cost --id --wait" ;;
    "functions load")       opts="--replace" ;;
    "simulate "*)           COMPREPLY=($(compgen -W "--out --plot --help" -- "$cur")); return ;;
    esac

    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts --url --json --help" -- "$cur"))
    elif [[ ($cmd == check || $cmd == peek) && $COMP_CWORD -eq 3 ]]; then
        COMPREPLY=($(compgen -W "fixed sliding slidelog token leaky gcra" -- "$cur"))
    elif [[ "$cmd $sub" == "policy apply" ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}

complete -F _floodgate floodgate
