"""Sources of the bundled stdin/stdout problems: statement, reference solutions, input generators.

Only `build_stdio.py` reads this module; it runs the references to produce the expected outputs
stored in `data/stdio.jsonl`. Each generator takes a seeded `random.Random` and returns the inputs
of the problem's cases (fixed edge cases first, then random ones), so the file is reproducible.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["PROBLEMS", "Source"]

Gen = Callable[[random.Random], list[str]]


@dataclass(frozen=True)
class Source:
    problem_id: str
    prompt: str
    references: dict[str, str]
    gen: Gen
    tags: tuple[str, ...] = field(default=())


def _ints(xs: list[int]) -> str:
    return " ".join(map(str, xs))


def _arrays(
    rng: random.Random, fixed: list[list[int]], lo: int, hi: int, n: int = 4, size: int = 50
) -> list[str]:
    """Inputs "n\\na1 .. an\\n": the fixed arrays, then `n` random ones."""
    arrays = list(fixed) + [[rng.randint(lo, hi) for _ in range(rng.randint(1, size))] for _ in range(n)]
    return [f"{len(a)}\n{_ints(a)}\n" for a in arrays]


def _words(
    rng: random.Random, k: int, alphabet: str = "abcdefghijklmnopqrstuvwxyz", lo: int = 1, hi: int = 8
) -> list[str]:
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi))) for _ in range(k)]


PROBLEMS: list[Source] = []


def problem(problem_id: str, prompt: str, gen: Gen, **refs: str) -> None:
    PROBLEMS.append(
        Source(problem_id, prompt.strip() + "\n", {k: v.strip() + "\n" for k, v in refs.items()}, gen)
    )


# --- arithmetic ------------------------------------------------------------------------------

problem(
    "a_plus_b",
    "Read two integers a and b (|a|, |b| <= 10^18) separated by whitespace. Print a + b.",
    lambda r: (
        ["1 2\n", "-5 5\n", "0 0\n", "1000000000000000000 -1\n"]
        + [f"{r.randint(-(10**12), 10**12)} {r.randint(-(10**12), 10**12)}\n" for _ in range(3)]
    ),
    python="a, b = map(int, input().split())\nprint(a + b)",
    c='#include <stdio.h>\nint main(void){long long a,b;if(scanf("%lld %lld",&a,&b)!=2)return 1;'
    'printf("%lld\\n",a+b);return 0;}',
    cpp='#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<"\\n";}',
    java="import java.util.*;\npublic class Main {\n  public static void main(String[] args) {\n    Scanner in = new Scanner(System.in);\n    System.out.println(in.nextLong() + in.nextLong());\n  }\n}",
    javascript='const [a, b] = require("fs").readFileSync(0, "utf8").trim().split(/\\s+/).map(BigInt);\nconsole.log((a + b).toString());',
    typescript='const [a, b]: bigint[] = require("fs").readFileSync(0, "utf8").trim().split(/\\s+/).map(BigInt);\nconsole.log((a + b).toString());',
    go='package main\n\nimport "fmt"\n\nfunc main() {\n\tvar a, b int64\n\tfmt.Scan(&a, &b)\n\tfmt.Println(a + b)\n}',
    rust='use std::io::Read;\nfn main() {\n    let mut s = String::new();\n    std::io::stdin().read_to_string(&mut s).unwrap();\n    let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();\n    println!("{}", v[0] + v[1]);\n}',
)

problem(
    "sum_array",
    "The first line holds n (1 <= n <= 1000), the second n integers. Print their sum.",
    lambda r: _arrays(r, [[5], [-1, 1], [10**9] * 10], -(10**9), 10**9, n=3, size=1000),
    python="input()\nprint(sum(map(int, input().split())))",
    c='#include <stdio.h>\nint main(void){int n;long long s=0,x;scanf("%d",&n);'
    'for(int i=0;i<n;i++){scanf("%lld",&x);s+=x;}printf("%lld\\n",s);return 0;}',
    java="import java.util.*;\npublic class Main {\n  public static void main(String[] args) {\n    Scanner in = new Scanner(System.in);\n    int n = in.nextInt();\n    long s = 0;\n    for (int i = 0; i < n; i++) s += in.nextLong();\n    System.out.println(s);\n  }\n}",
    javascript='const t = require("fs").readFileSync(0, "utf8").trim().split(/\\s+/).map(Number);\nconsole.log(t.slice(1, 1 + t[0]).reduce((x, y) => x + y, 0));',
    typescript='const t: number[] = require("fs").readFileSync(0, "utf8").trim().split(/\\s+/).map(Number);\nconsole.log(t.slice(1, 1 + t[0]).reduce((x: number, y: number) => x + y, 0));',
    go='package main\n\nimport (\n\t"bufio"\n\t"fmt"\n\t"os"\n)\n\nfunc main() {\n\tr := bufio.NewReader(os.Stdin)\n\tvar n int\n\tfmt.Fscan(r, &n)\n\tvar s, x int64\n\tfor i := 0; i < n; i++ {\n\t\tfmt.Fscan(r, &x)\n\t\ts += x\n\t}\n\tfmt.Println(s)\n}',
    rust='use std::io::Read;\nfn main() {\n    let mut s = String::new();\n    std::io::stdin().read_to_string(&mut s).unwrap();\n    let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();\n    let n = v[0] as usize;\n    println!("{}", v[1..1 + n].iter().sum::<i64>());\n}',
)

problem(
    "max_min",
    "The first line holds n (1 <= n <= 1000), the second n integers. Print the maximum and the "
    "minimum, separated by a space.",
    lambda r: _arrays(r, [[7], [3, -3], [2, 2, 2]], -1000, 1000),
    python="input()\na = list(map(int, input().split()))\nprint(max(a), min(a))",
    cpp="#include <bits/stdc++.h>\nint main(){int n;std::cin>>n;std::vector<long long>a(n);for(auto&x:a)std::cin>>x;"
    'std::cout<<*std::max_element(a.begin(),a.end())<<" "<<*std::min_element(a.begin(),a.end())<<"\\n";}',
    java='import java.util.*;\npublic class Main {\n  public static void main(String[] args) {\n    Scanner in = new Scanner(System.in);\n    int n = in.nextInt();\n    long mx = Long.MIN_VALUE, mn = Long.MAX_VALUE;\n    for (int i = 0; i < n; i++) { long x = in.nextLong(); mx = Math.max(mx, x); mn = Math.min(mn, x); }\n    System.out.println(mx + " " + mn);\n  }\n}',
    javascript='const t = require("fs").readFileSync(0, "utf8").trim().split(/\\s+/).map(Number);\nconst a = t.slice(1, 1 + t[0]);\nconsole.log(Math.max(...a) + " " + Math.min(...a));',
    typescript='const t: number[] = require("fs").readFileSync(0, "utf8").trim().split(/\\s+/).map(Number);\nconst a: number[] = t.slice(1, 1 + t[0]);\nconsole.log(`${Math.max(...a)} ${Math.min(...a)}`);',
    go='package main\n\nimport "fmt"\n\nfunc main() {\n\tvar n int\n\tfmt.Scan(&n)\n\tvar mx, mn int64 = -1 << 62, 1 << 62\n\tfor i := 0; i < n; i++ {\n\t\tvar x int64\n\t\tfmt.Scan(&x)\n\t\tif x > mx {\n\t\t\tmx = x\n\t\t}\n\t\tif x < mn {\n\t\t\tmn = x\n\t\t}\n\t}\n\tfmt.Println(mx, mn)\n}',
    rust='use std::io::Read;\nfn main() {\n    let mut s = String::new();\n    std::io::stdin().read_to_string(&mut s).unwrap();\n    let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();\n    let a = &v[1..1 + v[0] as usize];\n    println!("{} {}", a.iter().max().unwrap(), a.iter().min().unwrap());\n}',
)

problem(
    "factorial_mod",
    "Read n (0 <= n <= 100000). Print n! modulo 1000000007.",
    lambda r: ["0\n", "1\n", "5\n", "20\n", "100000\n"] + [f"{r.randint(2, 100000)}\n" for _ in range(2)],
    python="n = int(input())\nm = 10**9 + 7\nf = 1\nfor i in range(2, n + 1):\n    f = f * i % m\nprint(f)",
    cpp="#include <iostream>\nint main(){long long n,f=1,m=1000000007;std::cin>>n;for(long long i=2;i<=n;i++)f=f*i%m;"
    'std::cout<<f<<"\\n";}',
    java="import java.util.*;\npublic class Main {\n  public static void main(String[] args) {\n    Scanner in = new Scanner(System.in);\n    long n = in.nextLong(), f = 1, m = 1000000007L;\n    for (long i = 2; i <= n; i++) f = f * i % m;\n    System.out.println(f);\n  }\n}",
    javascript='const n = Number(require("fs").readFileSync(0, "utf8").trim());\nlet f = 1;\nfor (let i = 2; i <= n; i++) f = (f * i) % 1000000007;\nconsole.log(f);',
    typescript='const n: number = Number(require("fs").readFileSync(0, "utf8").trim());\nlet f: number = 1;\nfor (let i = 2; i <= n; i++) f = (f * i) % 1000000007;\nconsole.log(f);',
    go='package main\n\nimport "fmt"\n\nfunc main() {\n\tvar n int64\n\tfmt.Scan(&n)\n\tf := int64(1)\n\tfor i := int64(2); i <= n; i++ {\n\t\tf = f * i % 1000000007\n\t}\n\tfmt.Println(f)\n}',
    rust='fn main() {\n    let mut s = String::new();\n    std::io::stdin().read_line(&mut s).unwrap();\n    let n: u64 = s.trim().parse().unwrap();\n    let mut f: u64 = 1;\n    for i in 2..=n {\n        f = f * i % 1_000_000_007;\n    }\n    println!("{}", f);\n}',
)

problem(
    "fibonacci",
    "Read n (0 <= n <= 90). Print the n-th Fibonacci number, with F(0) = 0 and F(1) = 1.",
    lambda r: ["0\n", "1\n", "2\n", "10\n", "90\n"] + [f"{r.randint(3, 89)}\n" for _ in range(2)],
    python="n = int(input())\na, b = 0, 1\nfor _ in range(n):\n    a, b = b, a + b\nprint(a)",
    c='#include <stdio.h>\nint main(void){int n;long long a=0,b=1,t;scanf("%d",&n);'
    'for(int i=0;i<n;i++){t=a+b;a=b;b=t;}printf("%lld\\n",a);return 0;}',
    java="import java.util.*;\npublic class Main {\n  public static void main(String[] args) {\n    Scanner in = new Scanner(System.in);\n    int n = in.nextInt();\n    long a = 0, b = 1;\n    for (int i = 0; i < n; i++) { long t = a + b; a = b; b = t; }\n    System.out.println(a);\n  }\n}",
    javascript='const n = Number(require("fs").readFileSync(0, "utf8").trim());\nlet [a, b] = [0n, 1n];\nfor (let i = 0; i < n; i++) [a, b] = [b, a + b];\nconsole.log(a.toString());',
    typescript='const n: number = Number(require("fs").readFileSync(0, "utf8").trim());\nlet a: bigint = 0n, b: bigint = 1n;\nfor (let i = 0; i < n; i++) [a, b] = [b, a + b];\nconsole.log(a.toString());',
    go='package main\n\nimport "fmt"\n\nfunc main() {\n\tvar n int\n\tfmt.Scan(&n)\n\tvar a, b uint64 = 0, 1\n\tfor i := 0; i < n; i++ {\n\t\ta, b = b, a+b\n\t}\n\tfmt.Println(a)\n}',
    rust='fn main() {\n    let mut s = String::new();\n    std::io::stdin().read_line(&mut s).unwrap();\n    let n: u32 = s.trim().parse().unwrap();\n    let (mut a, mut b): (u64, u64) = (0, 1);\n    for _ in 0..n {\n        let t = a + b;\n        a = b;\n        b = t;\n    }\n    println!("{}", a);\n}',
)

problem(
    "gcd_lcm",
    "Read two positive integers a and b (<= 10^9). Print gcd(a, b) and lcm(a, b) separated by a space.",
    lambda r: (
        ["12 18\n", "7 13\n", "1 1\n", "1000000000 999999999\n"]
        + [f"{r.randint(1, 10**6)} {r.randint(1, 10**6)}\n" for _ in range(3)]
    ),
    python="import math\na, b = map(int, input().split())\ng = math.gcd(a, b)\nprint(g, a // g * b)",
    c='#include <stdio.h>\nint main(void){long long a,b,x,y,t;scanf("%lld %lld",&a,&b);x=a;y=b;'
    'while(y){t=x%y;x=y;y=t;}printf("%lld %lld\\n",x,a/x*b);return 0;}',
    java='import java.util.*;\npublic class Main {\n  public static void main(String[] args) {\n    Scanner in = new Scanner(System.in);\n    long a = in.nextLong(), b = in.nextLong(), x = a, y = b;\n    while (y != 0) { long t = x % y; x = y; y = t; }\n    System.out.println(x + " " + (a / x * b));\n  }\n}',
    javascript='const [a, b] = require("fs").readFileSync(0, "utf8").trim().split(/\\s+/).map(BigInt);\nlet [x, y] = [a, b];\nwhile (y) [x, y] = [y, x % y];\nconsole.log(`${x} ${(a / x) * b}`);',
    typescript='const [a, b]: bigint[] = require("fs").readFileSync(0, "utf8").trim().split(/\\s+/).map(BigInt);\nlet x: bigint = a, y: bigint = b;\nwhile (y !== 0n) [x, y] = [y, x % y];\nconsole.log(`${x} ${(a / x) * b}`);',
    go='package main\n\nimport "fmt"\n\nfunc main() {\n\tvar a, b int64\n\tfmt.Scan(&a, &b)\n\tx, y := a, b\n\tfor y != 0 {\n\t\tx, y = y, x%y\n\t}\n\tfmt.Println(x, a/x*b)\n}',
    rust='use std::io::Read;\nfn main() {\n    let mut s = String::new();\n    std::io::stdin().read_to_string(&mut s).unwrap();\n    let v: Vec<u64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();\n    let (a, b) = (v[0], v[1]);\n    let (mut x, mut y) = (a, b);\n    while y != 0 {\n        let t = x % y;\n        x = y;\n        y = t;\n    }\n    println!("{} {}", x, a / x * b);\n}',
)

problem(
    "prime_queries",
    "The first line holds t (1 <= t <= 100). Each of the next t lines holds an integer n "
    "(1 <= n <= 10^9). For each, print YES if n is prime, else NO.",
    lambda r: (
        ["1\n1\n", "3\n2\n3\n4\n", "2\n1000000007\n999999999\n", "1\n97\n"]
        + ["{}\n{}\n".format(k, "\n".join(str(r.randint(1, 10**9)) for _ in range(k))) for k in (10, 50, 100)]
    ),
    python="def prime(n):\n    if n < 2:\n        return False\n    i = 2\n    while i * i <= n:\n"
    "        if n % i == 0:\n            return False\n        i += 1\n    return True\n\n"
    "for _ in range(int(input())):\n    print('YES' if prime(int(input())) else 'NO')",
    cpp="#include <iostream>\nbool p(long long n){if(n<2)return false;for(long long i=2;i*i<=n;i++)if(n%i==0)return false;"
    'return true;}\nint main(){int t;std::cin>>t;while(t--){long long n;std::cin>>n;std::cout<<(p(n)?"YES":"NO")<<"\\n";}}',
)

problem(
    "count_primes",
    "Read n (1 <= n <= 10^6). Print how many primes are <= n.",
    lambda r: ["1\n", "2\n", "10\n", "100\n", "1000000\n"] + [f"{r.randint(3, 10**6)}\n" for _ in range(2)],
    python="n = int(input())\ns = bytearray([1]) * (n + 1)\ns[0] = 0\nif n >= 1:\n    s[1] = 0\n"
    "i = 2\nwhile i * i <= n:\n    if s[i]:\n        s[i * i :: i] = bytearray(len(range(i * i, n + 1, i)))\n"
    "    i += 1\nprint(sum(s))",
    cpp="#include <bits/stdc++.h>\nint main(){int n;std::cin>>n;std::vector<char>s(n+1,1);s[0]=0;if(n>=1)s[1]=0;"
    "for(long long i=2;i*i<=n;i++)if(s[i])for(long long j=i*i;j<=n;j+=i)s[j]=0;"
    'std::cout<<std::count(s.begin(),s.end(),1)<<"\\n";}',
)

problem(
    "collatz_steps",
    "Read n (1 <= n <= 10^6). Print how many steps of the Collatz map (n -> n/2 if even, else 3n+1) "
    "it takes to reach 1.",
    lambda r: ["1\n", "2\n", "3\n", "27\n", "837799\n"] + [f"{r.randint(1, 10**6)}\n" for _ in range(2)],
    python="n = int(input())\nk = 0\nwhile n != 1:\n    n = n // 2 if n % 2 == 0 else 3 * n + 1\n    k += 1\nprint(k)",
    c='#include <stdio.h>\nint main(void){long long n;int k=0;scanf("%lld",&n);while(n!=1){n=n%2?3*n+1:n/2;k++;}'
    'printf("%d\\n",k);return 0;}',
)

problem(
    "digit_sum",
    "The first line holds t. Each of the next t lines holds a non-negative integer of up to 200 "
    "digits. For each, print the sum of its digits.",
    lambda r: (
        ["1\n0\n", "2\n9\n99\n", "1\n1234567890\n"]
        + [
            "{}\n{}\n".format(k, "\n".join(str(r.randint(0, 10 ** r.randint(1, 200))) for _ in range(k)))
            for k in (3, 5, 10)
        ]
    ),
    python="for _ in range(int(input())):\n    print(sum(int(c) for c in input().strip()))",
)

problem(
    "binary_repr",
    "The first line holds t. Each of the next t lines holds an integer n (0 <= n <= 10^18). "
    "Print n in binary without leading zeros.",
    lambda r: (
        ["1\n0\n", "3\n1\n2\n5\n", "1\n1000000000000000000\n"]
        + ["{}\n{}\n".format(k, "\n".join(str(r.randint(0, 10**18)) for _ in range(k))) for k in (4, 8)]
    ),
    python="for _ in range(int(input())):\n    print(bin(int(input()))[2:])",
    cpp="#include <iostream>\n#include <string>\nint main(){int t;std::cin>>t;while(t--){unsigned long long n;std::cin>>n;"
    'std::string s;if(!n)s="0";while(n){s=char(48+(n&1))+s;n>>=1;}std::cout<<s<<"\\n";}}',
)

problem(
    "average",
    "The first line holds n (1 <= n <= 1000), the second n integers. Print their mean with exactly "
    "6 digits after the decimal point.",
    lambda r: _arrays(r, [[1], [1, 2], [1, 2, 2]], -(10**6), 10**6),
    python="n = int(input())\nprint(f'{sum(map(int, input().split())) / n:.6f}')",
    c='#include <stdio.h>\nint main(void){int n;long long s=0,x;scanf("%d",&n);for(int i=0;i<n;i++){scanf("%lld",&x);s+=x;}'
    'printf("%.6f\\n",(double)s/n);return 0;}',
)

problem(
    "roman_numerals",
    "The first line holds t. Each of the next t lines holds an integer 1 <= n <= 3999. Print n in "
    "Roman numerals.",
    lambda r: (
        ["1\n1\n", "3\n4\n9\n14\n", "2\n3999\n1994\n"]
        + ["{}\n{}\n".format(k, "\n".join(str(r.randint(1, 3999)) for _ in range(k))) for k in (5, 10)]
    ),
    python="V = [(1000, 'M'), (900, 'CM'), (500, 'D'), (400, 'CD'), (100, 'C'), (90, 'XC'), (50, 'L'),\n"
    "     (40, 'XL'), (10, 'X'), (9, 'IX'), (5, 'V'), (4, 'IV'), (1, 'I')]\n"
    "for _ in range(int(input())):\n    n = int(input())\n    out = ''\n    for v, s in V:\n"
    "        while n >= v:\n            out += s\n            n -= v\n    print(out)",
)

# --- strings ---------------------------------------------------------------------------------

problem(
    "reverse_string",
    "Read one line of printable ASCII without spaces at its ends. Print it reversed.",
    lambda r: ["abc\n", "a\n", "racecar\n", "hello world\n"] + [w + "\n" for w in _words(r, 3, hi=30)],
    python="print(input()[::-1])",
    c="#include <stdio.h>\n#include <string.h>\nint main(void){static char s[100005];if(!fgets(s,sizeof s,stdin))return 0;"
    "size_t n=strlen(s);while(n&&(s[n-1]==10||s[n-1]==13))n--;for(size_t i=n;i>0;i--)putchar(s[i-1]);putchar(10);return 0;}",
)

problem(
    "palindrome",
    "Read one word of lowercase letters. Print YES if it reads the same backwards, else NO.",
    lambda r: (
        ["a\n", "abba\n", "abc\n", "racecar\n", "ab\n"]
        + [w + w[::-1] + "\n" for w in _words(r, 1)]
        + [w + "\n" for w in _words(r, 2, alphabet="ab", lo=3)]
    ),
    python="s = input().strip()\nprint('YES' if s == s[::-1] else 'NO')",
    cpp="#include <iostream>\n#include <string>\nint main(){std::string s;std::cin>>s;"
    'std::cout<<(std::string(s.rbegin(),s.rend())==s?"YES":"NO")<<"\\n";}',
)

problem(
    "word_count",
    "Read the whole input (several lines of text). Print the number of words (maximal runs of "
    "non-whitespace characters).",
    lambda r: (
        ["hello\n", "a b  c\n", "\n", "one\ntwo three\n\nfour\n"]
        + [
            "\n".join(" ".join(_words(r, r.randint(0, 8))) for _ in range(r.randint(1, 6))) + "\n"
            for _ in range(3)
        ]
    ),
    python="import sys\nprint(len(sys.stdin.read().split()))",
    c="#include <stdio.h>\n#include <ctype.h>\nint main(void){int c,in=0;long n=0;while((c=getchar())!=EOF){"
    'if(isspace(c))in=0;else if(!in){in=1;n++;}}printf("%ld\\n",n);return 0;}',
)

problem(
    "char_frequency",
    "Read one word of lowercase letters. For each distinct letter in alphabetical order, print the "
    "letter and its count on its own line, separated by a space.",
    lambda r: ["a\n", "banana\n", "zzz\n", "abcabc\n"] + [w + "\n" for w in _words(r, 3, lo=5, hi=40)],
    python="from collections import Counter\nc = Counter(input().strip())\nfor k in sorted(c):\n    print(k, c[k])",
)

problem(
    "caesar_cipher",
    "The first line holds a shift k (0 <= k <= 25), the second a line of text. Shift every letter "
    "forward by k places in the alphabet (wrapping, keeping case); other characters stay. Print it.",
    lambda r: (
        ["3\nabc xyz\n", "0\nHello, World!\n", "25\nAbc\n", "13\nThe Quick Brown Fox.\n"]
        + [f"{r.randint(0, 25)}\n{' '.join(_words(r, 4, alphabet='abcXYZ!'))}\n" for _ in range(3)]
    ),
    python="k = int(input())\nout = []\nfor ch in input():\n    if ch.islower():\n"
    "        out.append(chr((ord(ch) - 97 + k) % 26 + 97))\n    elif ch.isupper():\n"
    "        out.append(chr((ord(ch) - 65 + k) % 26 + 65))\n    else:\n        out.append(ch)\nprint(''.join(out))",
    c='#include <stdio.h>\nint main(void){int k,c;scanf("%d",&k);while((c=getchar())!=10&&c!=EOF);'
    "while((c=getchar())!=EOF&&c!=10){if(c>=97&&c<=122)c=(c-97+k)%26+97;else if(c>=65&&c<=90)c=(c-65+k)%26+65;"
    "putchar(c);}putchar(10);return 0;}",
)

problem(
    "anagrams",
    "Read two words of lowercase letters on one line. Print YES if they are anagrams, else NO.",
    lambda r: (
        ["listen silent\n", "abc abd\n", "a a\n", "ab abc\n"]
        + [f"{w} {''.join(r.sample(w, len(w)))}\n" for w in _words(r, 2, lo=3)]
        + [f"{a} {b}\n" for a, b in zip(_words(r, 1, alphabet="ab"), _words(r, 1, alphabet="ab"))]
    ),
    python="a, b = input().split()\nprint('YES' if sorted(a) == sorted(b) else 'NO')",
)

problem(
    "balanced_brackets",
    "The first line holds t. Each of the next t lines holds a string of the characters ()[]{}. "
    "For each, print YES if it is balanced, else NO.",
    lambda r: (
        ["1\n()\n", "3\n([]{})\n([)]\n((\n", "1\n}\n"]
        + [
            "{}\n{}\n".format(
                k, "\n".join("".join(r.choice("()[]{}") for _ in range(r.randint(1, 12))) for _ in range(k))
            )
            for k in (5, 10)
        ]
        + ["3\n" + "(" * 50 + ")" * 50 + "\n{[()()]}\n[[[]]\n"]
    ),
    python="P = {')': '(', ']': '[', '}': '{'}\nfor _ in range(int(input())):\n    st = []\n    ok = True\n"
    "    for ch in input().strip():\n        if ch in '([{':\n            st.append(ch)\n"
    "        elif not st or st.pop() != P[ch]:\n            ok = False\n            break\n"
    "    print('YES' if ok and not st else 'NO')",
    cpp="#include <bits/stdc++.h>\nint main(){int t;std::cin>>t;while(t--){std::string s;std::cin>>s;std::string st;bool ok=true;"
    "for(char c:s){if(c=='('||c=='['||c=='{')st.push_back(c);else{char o=c==')'?'(':c==']'?'[':'{';"
    'if(st.empty()||st.back()!=o){ok=false;break;}st.pop_back();}}std::cout<<(ok&&st.empty()?"YES":"NO")<<"\\n";}}',
)

problem(
    "run_length",
    "Read one word of lowercase letters. Print its run-length encoding: each maximal run of one "
    "letter as the letter followed by the run's length (e.g. aaabcc -> a3b1c2).",
    lambda r: (
        ["a\n", "aaabcc\n", "abc\n", "zzzzzzzzzzzz\n"]
        + [w + "\n" for w in _words(r, 3, alphabet="ab", lo=5, hi=30)]
    ),
    python="import itertools\nprint(''.join(k + str(len(list(g))) for k, g in itertools.groupby(input().strip())))",
)

problem(
    "vowel_count",
    "Read one line of text. Print how many of its characters are vowels (a, e, i, o, u, either case).",
    lambda r: (
        ["hello\n", "AEIOU aeiou\n", "xyz\n", "Programming Is Fun\n"]
        + [" ".join(_words(r, 5, alphabet="abcdeiouxyzAEU")) + "\n" for _ in range(3)]
    ),
    python="print(sum(ch in 'aeiouAEIOU' for ch in input()))",
    c="#include <stdio.h>\n#include <string.h>\nint main(void){int c,n=0;while((c=getchar())!=EOF&&c!=10)"
    'if(c&&strchr("aeiouAEIOU",c))n++;printf("%d\\n",n);return 0;}',
)

problem(
    "title_case",
    "Read one line of lowercase words separated by single spaces. Print it with the first letter of "
    "every word capitalized.",
    lambda r: (
        ["hello world\n", "a\n", "the quick brown fox\n", "x y z\n"]
        + [" ".join(_words(r, 5)) + "\n" for _ in range(3)]
    ),
    python="print(' '.join(w[:1].upper() + w[1:] for w in input().split(' ')))",
)

# --- arrays ----------------------------------------------------------------------------------

problem(
    "sort_numbers",
    "The first line holds n (1 <= n <= 1000), the second n integers. Print them sorted ascending, "
    "separated by spaces.",
    lambda r: _arrays(r, [[1], [3, 1, 2], [5, 5, -5]], -(10**6), 10**6),
    python="input()\nprint(*sorted(map(int, input().split())))",
    cpp="#include <bits/stdc++.h>\nint main(){int n;std::cin>>n;std::vector<long long>a(n);for(auto&x:a)std::cin>>x;"
    "std::sort(a.begin(),a.end());for(int i=0;i<n;i++)std::cout<<a[i]<<(i+1<n?' ':'\\n');}",
)

problem(
    "distinct_count",
    "The first line holds n (1 <= n <= 1000), the second n integers. Print how many distinct values "
    "there are.",
    lambda r: _arrays(r, [[1], [2, 2, 2], [1, 2, 3]], 0, 20),
    python="input()\nprint(len(set(input().split())))",
)

problem(
    "max_subarray",
    "The first line holds n (1 <= n <= 1000), the second n integers. Print the largest sum of a "
    "non-empty contiguous subarray.",
    lambda r: _arrays(r, [[-3], [-2, 1, -3, 4, -1, 2, 1, -5, 4], [5, -1, 5]], -100, 100),
    python="input()\nbest = cur = None\nfor x in map(int, input().split()):\n"
    "    cur = x if cur is None or cur < 0 else cur + x\n    best = cur if best is None else max(best, cur)\nprint(best)",
    c='#include <stdio.h>\nint main(void){int n;long long x,cur=0,best=0;scanf("%d",&n);for(int i=0;i<n;i++){'
    'scanf("%lld",&x);cur=(i==0||cur<0)?x:cur+x;if(i==0||cur>best)best=cur;}printf("%lld\\n",best);return 0;}',
)

problem(
    "two_sum_count",
    "The first line holds n (1 <= n <= 1000) and a target s, the second n integers a_1..a_n. Print "
    "the number of pairs i < j with a_i + a_j = s.",
    lambda r: (
        ["1 2\n1\n", "4 5\n1 4 2 3\n", "3 4\n2 2 2\n"]
        + [
            f"{n} {r.randint(-10, 10)}\n{_ints([r.randint(-10, 10) for _ in range(n)])}\n"
            for n in (10, 100, 1000)
        ]
    ),
    python="from collections import Counter\nn, s = map(int, input().split())\nseen = Counter()\nk = 0\n"
    "for x in map(int, input().split()):\n    k += seen[s - x]\n    seen[x] += 1\nprint(k)",
)

problem(
    "lis_length",
    "The first line holds n (1 <= n <= 1000), the second n integers. Print the length of the longest "
    "strictly increasing subsequence.",
    lambda r: _arrays(
        r, [[1], [3, 2, 1], [1, 2, 3, 4], [10, 9, 2, 5, 3, 7, 101, 18]], 0, 100, n=3, size=1000
    ),
    python="import bisect\ninput()\nt = []\nfor x in map(int, input().split()):\n    i = bisect.bisect_left(t, x)\n"
    "    if i == len(t):\n        t.append(x)\n    else:\n        t[i] = x\nprint(len(t))",
    cpp="#include <bits/stdc++.h>\nint main(){int n;std::cin>>n;std::vector<long long>t;for(int i=0;i<n;i++){long long x;"
    "std::cin>>x;auto it=std::lower_bound(t.begin(),t.end(),x);if(it==t.end())t.push_back(x);else*it=x;}"
    'std::cout<<t.size()<<"\\n";}',
)

problem(
    "lower_bound_queries",
    "The first line holds n and q. The second holds n integers sorted ascending, the third q "
    "integers. For each query x print the number of array elements strictly less than x, one per line.",
    lambda r: (
        ["1 1\n5\n5\n", "3 3\n1 2 3\n0 2 4\n", "5 2\n1 1 1 1 1\n1 2\n"]
        + [
            f"{n} {q}\n{_ints(sorted(r.randint(0, 100) for _ in range(n)))}\n{_ints([r.randint(-5, 105) for _ in range(q)])}\n"
            for n, q in ((10, 5), (100, 50), (1000, 200))
        ]
    ),
    python="import bisect\ninput()\na = list(map(int, input().split()))\n"
    "print('\\n'.join(str(bisect.bisect_left(a, int(x))) for x in input().split()))",
    cpp="#include <bits/stdc++.h>\nint main(){int n,q;std::cin>>n>>q;std::vector<long long>a(n);for(auto&x:a)std::cin>>x;"
    'while(q--){long long x;std::cin>>x;std::cout<<(std::lower_bound(a.begin(),a.end(),x)-a.begin())<<"\\n";}}',
)

# --- matrices, dynamic programming, graphs ---------------------------------------------------


def _matrix(r: random.Random, rows: int, cols: int, lo: int = -9, hi: int = 9) -> str:
    return "".join(_ints([r.randint(lo, hi) for _ in range(cols)]) + "\n" for _ in range(rows))


problem(
    "matrix_transpose",
    "The first line holds r and c (1 <= r, c <= 50), then r lines of c integers. Print the transpose "
    "(c lines of r integers).",
    lambda r: (
        ["1 1\n7\n", "2 3\n1 2 3\n4 5 6\n", "3 1\n1\n2\n3\n"]
        + [f"{a} {b}\n{_matrix(r, a, b)}" for a, b in ((4, 4), (5, 2), (10, 20))]
    ),
    python="r, c = map(int, input().split())\nm = [input().split() for _ in range(r)]\nfor row in zip(*m):\n    print(*row)",
)

problem(
    "matrix_multiply",
    "The first line holds n, m, p (1 <= n, m, p <= 30). Then an n x m matrix A and an m x p matrix B, "
    "one row per line. Print A times B, one row per line.",
    lambda r: (
        ["1 1 1\n2\n3\n", "2 2 2\n1 0\n0 1\n4 5\n6 7\n", "1 3 1\n1 2 3\n4\n5\n6\n"]
        + [
            f"{n} {m} {p}\n{_matrix(r, n, m)}{_matrix(r, m, p)}"
            for n, m, p in ((3, 4, 2), (5, 5, 5), (20, 30, 10))
        ]
    ),
    python="n, m, p = map(int, input().split())\nA = [list(map(int, input().split())) for _ in range(n)]\n"
    "B = [list(map(int, input().split())) for _ in range(m)]\nfor row in A:\n"
    "    print(*(sum(row[k] * B[k][j] for k in range(m)) for j in range(p)))",
    c='#include <stdio.h>\nint main(void){int n,m,p;static long long A[30][30],B[30][30];scanf("%d %d %d",&n,&m,&p);'
    'for(int i=0;i<n;i++)for(int j=0;j<m;j++)scanf("%lld",&A[i][j]);for(int i=0;i<m;i++)for(int j=0;j<p;j++)scanf("%lld",&B[i][j]);'
    "for(int i=0;i<n;i++){for(int j=0;j<p;j++){long long s=0;for(int k=0;k<m;k++)s+=A[i][k]*B[k][j];"
    'printf(j+1<p?"%lld ":"%lld\\n",s);}}return 0;}',
)

problem(
    "knapsack",
    "The first line holds n (1 <= n <= 100) and a capacity W (1 <= W <= 10000). Each of the next n "
    "lines holds an item's weight and value. Print the largest total value of items with total "
    "weight <= W, each item used at most once.",
    lambda r: (
        ["1 1\n2 5\n", "3 50\n10 60\n20 100\n30 120\n", "2 5\n5 10\n5 20\n"]
        + [
            "{} {}\n{}".format(n, w, "".join(f"{r.randint(1, w)} {r.randint(1, 1000)}\n" for _ in range(n)))
            for n, w in ((10, 100), (50, 1000), (100, 10000))
        ]
    ),
    python="n, W = map(int, input().split())\nbest = [0] * (W + 1)\nfor _ in range(n):\n"
    "    w, v = map(int, input().split())\n    for c in range(W, w - 1, -1):\n"
    "        if best[c - w] + v > best[c]:\n            best[c] = best[c - w] + v\nprint(best[W])",
    cpp="#include <bits/stdc++.h>\nint main(){int n,W;std::cin>>n>>W;std::vector<long long>b(W+1,0);"
    "for(int i=0;i<n;i++){int w;long long v;std::cin>>w>>v;for(int c=W;c>=w;c--)b[c]=std::max(b[c],b[c-w]+v);}"
    'std::cout<<b[W]<<"\\n";}',
)

problem(
    "coin_change",
    "The first line holds k coin denominations count and an amount A (0 <= A <= 10000), the second "
    "the k denominations. Print the fewest coins summing to A (unlimited supply), or -1 if impossible.",
    lambda r: (
        ["1 3\n2\n", "3 11\n1 2 5\n", "2 0\n3 7\n", "2 7\n2 4\n"]
        + [f"{k} {r.randint(0, 10000)}\n{_ints(r.sample(range(1, 60), k))}\n" for k in (2, 4, 6)]
    ),
    python="k, A = map(int, input().split())\ncoins = list(map(int, input().split()))\nINF = float('inf')\n"
    "d = [0] + [INF] * A\nfor a in range(1, A + 1):\n    for c in coins:\n"
    "        if c <= a and d[a - c] + 1 < d[a]:\n            d[a] = d[a - c] + 1\n"
    "print(d[A] if d[A] != INF else -1)",
    cpp="#include <bits/stdc++.h>\nint main(){int k,A;std::cin>>k>>A;std::vector<int>c(k);for(auto&x:c)std::cin>>x;"
    "const int INF=1<<29;std::vector<int>d(A+1,INF);d[0]=0;for(int a=1;a<=A;a++)for(int x:c)if(x<=a&&d[a-x]+1<d[a])d[a]=d[a-x]+1;"
    'std::cout<<(d[A]>=INF?-1:d[A])<<"\\n";}',
)

problem(
    "grid_paths",
    "The first line holds r and c (1 <= r, c <= 100), then r lines of c characters, '.' free and '#' "
    "blocked. Moving only right or down, print the number of paths from the top-left to the "
    "bottom-right cell modulo 1000000007 (0 if either is blocked).",
    lambda r: (
        ["1 1\n.\n", "2 2\n..\n..\n", "3 3\n...\n.#.\n...\n", "2 2\n.#\n#.\n"]
        + [
            "{} {}\n{}".format(
                a,
                b,
                "".join(
                    "".join("#" if r.random() < 0.15 else "." for _ in range(b)) + "\n" for _ in range(a)
                ),
            )
            for a, b in ((5, 5), (20, 30), (100, 100))
        ]
    ),
    python="r, c = map(int, input().split())\ng = [input().strip() for _ in range(r)]\nM = 10**9 + 7\n"
    "d = [[0] * c for _ in range(r)]\nfor i in range(r):\n    for j in range(c):\n        if g[i][j] == '#':\n"
    "            continue\n        if i == 0 and j == 0:\n            d[i][j] = 1\n            continue\n"
    "        d[i][j] = ((d[i - 1][j] if i else 0) + (d[i][j - 1] if j else 0)) % M\nprint(d[r - 1][c - 1])",
)

problem(
    "shortest_path",
    "The first line holds n and m (1 <= n <= 1000, 0 <= m <= 5000): vertices 1..n of an undirected "
    "graph. Each of the next m lines holds an edge u v. The last line holds s and t. Print the "
    "fewest edges on a path from s to t, or -1 if there is none.",
    lambda r: (
        ["1 0\n1 1\n", "3 2\n1 2\n2 3\n1 3\n", "4 1\n1 2\n1 4\n", "4 4\n1 2\n2 3\n3 4\n1 4\n1 3\n"]
        + [
            "{} {}\n{}{} {}\n".format(
                n,
                m,
                "".join(f"{r.randint(1, n)} {r.randint(1, n)}\n" for _ in range(m)),
                r.randint(1, n),
                r.randint(1, n),
            )
            for n, m in ((10, 12), (100, 150), (1000, 2000))
        ]
    ),
    python="from collections import deque\nimport sys\ndata = sys.stdin.read().split()\nn, m = int(data[0]), int(data[1])\n"
    "adj = [[] for _ in range(n + 1)]\nfor i in range(m):\n    u, v = int(data[2 + 2 * i]), int(data[3 + 2 * i])\n"
    "    adj[u].append(v)\n    adj[v].append(u)\ns, t = int(data[2 + 2 * m]), int(data[3 + 2 * m])\n"
    "dist = [-1] * (n + 1)\ndist[s] = 0\nq = deque([s])\nwhile q:\n    u = q.popleft()\n    for v in adj[u]:\n"
    "        if dist[v] < 0:\n            dist[v] = dist[u] + 1\n            q.append(v)\nprint(dist[t])",
    cpp="#include <bits/stdc++.h>\nint main(){int n,m;std::cin>>n>>m;std::vector<std::vector<int>>g(n+1);"
    "for(int i=0;i<m;i++){int u,v;std::cin>>u>>v;g[u].push_back(v);g[v].push_back(u);}int s,t;std::cin>>s>>t;"
    "std::vector<int>d(n+1,-1);d[s]=0;std::deque<int>q{s};while(!q.empty()){int u=q.front();q.pop_front();"
    'for(int v:g[u])if(d[v]<0){d[v]=d[u]+1;q.push_back(v);}}std::cout<<d[t]<<"\\n";}',
)

problem(
    "fizzbuzz",
    "Read n (1 <= n <= 1000). For i = 1..n print FizzBuzz if i is divisible by 15, Fizz if by 3, "
    "Buzz if by 5, else i, one per line.",
    lambda r: ["1\n", "3\n", "5\n", "15\n", "100\n"] + [f"{r.randint(16, 1000)}\n" for _ in range(2)],
    python="for i in range(1, int(input()) + 1):\n"
    "    print('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 else i)",
    c='#include <stdio.h>\nint main(void){int n;scanf("%d",&n);for(int i=1;i<=n;i++){if(i%15==0)puts("FizzBuzz");'
    'else if(i%3==0)puts("Fizz");else if(i%5==0)puts("Buzz");else printf("%d\\n",i);}return 0;}',
)

problem(
    "pascal_row",
    "Read n (0 <= n <= 60). Print row n of Pascal's triangle (n+1 numbers separated by spaces).",
    lambda r: ["0\n", "1\n", "4\n", "10\n", "60\n"] + [f"{r.randint(2, 59)}\n" for _ in range(2)],
    python="n = int(input())\nrow = [1]\nfor k in range(n):\n    row.append(row[-1] * (n - k) // (k + 1))\nprint(*row)",
    cpp="#include <iostream>\nint main(){int n;std::cin>>n;unsigned long long v=1;for(int k=0;k<=n;k++){"
    "std::cout<<v<<(k<n?' ':'\\n');v=v*(n-k)/(k+1);}}",
)
