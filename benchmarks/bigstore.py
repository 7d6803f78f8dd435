"""A generated store of the size users report (issue 18): realistic sessions, tool output, CJK.

The store is written through ``SessionDB`` (schema, pragmas, both FTS tables and their
triggers), one write transaction per batch of whole sessions, so every row is indexed exactly
as ``append_message`` would index it. Deterministic for a seed; built until ``state.db``
reaches the target size, then checkpointed (TRUNCATE) and closed, so the cached file is one
self-contained database.

Shape (per session, drawn from the seed):

* sources ``cli``/``telegram``/``discord``/``slack``/``cron``; 10 % of sessions are CJK
  (Chinese or Japanese user and assistant text); about 95 % ended; 5 % are children
  (``parent_session_id``) of an earlier one; one in 400 is long-running (200-1200 turns, a
  gateway thread), and session ``s00000`` is the longest of all (4000 turns in a 1 GB store);
* turns: a user message (one sentence to a paragraph), an assistant reply (a few sentences,
  sometimes with ``reasoning``), and in half the turns one to three tool calls
  (``tool_calls`` JSON on the assistant row) each followed by a ``tool`` row whose content is
  command output (log lines, JSON, a source file or a directory listing; 300 B to 60 KB,
  log-normal);
* timestamps over the 365 days before :data:`EPOCH_END`, in order within a session.

Usage::

    python -m benchmarks.bigstore --out /tmp/big/state.db --mb 1024
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_state import SessionDB  # noqa: E402

#: The newest timestamp of the generated store (2026-01-01T00:00:00Z); ages are measured from
#: the real clock, so a cached store gets older: prune thresholds are derived from its rows.
EPOCH_END = 1_767_225_600.0
DAY = 86_400.0
GENERATOR_VERSION = 1  # part of the cache key: bump when the shape changes

_EN = ("the a to of and in is for on with that this it be are as at by from or an was not we "
       "you can will should would could if then else when which what where how why there here "
       "deploy deployment docker kubernetes terraform build failed error timeout retry python "
       "java rust go session message agent tool memory search index query database sqlite "
       "server client request response token model prompt context cache config file path "
       "migrate migration backup restore snapshot commit branch merge test pipeline release "
       "user assistant system gateway telegram discord channel thread update version function "
       "class module import return value list dict string number array object field column "
       "table row schema upgrade install package dependency network port socket latency "
       "throughput benchmark profile trace log metric alert dashboard queue worker job cron "
       "schedule retry backoff lock transaction checkpoint journal page cursor iterator "
       "please thanks sure let me check look see run fix try again works now great").split()
_CJK_ZH = ("的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能"
           "下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实"
           "加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样"
           "与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情"
           "者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级"
           "少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队南给色"
           "光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再"
           "采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马"
           "节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须"
           "际商非验连断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准"
           "精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火"
           "住调满县局照参红细引听该铁价严首底液官德随病苏失尔死讲配女黄推显谈罪神艺呢席含企望密批营"
           "项防举球英氧势告李台落木帮轮破亚师围注远字材排供河态封另施减树溶怎止案言士均武固叶鱼波视"
           "仅费紧爱左章早朝害续轻服试食充兵源判护司足某练差致板田降黑犯负击范继兴似余坚曲输修故城夫"
           "够送笔船占右财吃富春职觉汉画功巴跟虽杂飞检吸助升阳互初创抗考投坏策古径换未跑留钢曾端责站"
           "简述钱副尽帝射草冲承独令限阿宣环双请超微让控州良轴找否纪益依优顶础载倒房突坐粉敌略客袁冷"
           "胜绝析块剂测丝协诉念陈仍罗盐友洋错苦夜刑移频逐靠混母短皮终聚汽村云哪既距卫停烈央察烧迅境"
           "若印洲刻括激孔搞甚室待核校散侵吧甲游久菜味旧模湖货损预阻毫普稳乙妈植息扩银语挥酒守拿序纸"
           "医缺雨吗针刘啊急唱误训愿审附获茶鲜粮斤孩脱硫肥善龙演父渐血欢械掌歌沙刚攻谓盾讨晚粒乱燃矛"
           "乎杀药宁鲁贵钟煤读班伯香介迫句丰培握兰担弦蛋沉假穿执答乐谁顺烟缩征脸喜松脚困异免背星福买"
           "染井概慢怕磁倍祖皇促静补评翻肉践尼衣宽扬棉希伤操垂秋宜氢套督振架亮末宪庆编牛触映雷销诗座"
           "居抓裂胞呼娘景威绿晶厚盟衡鸡孙延危胶屋乡临陆顾掉呀灯岁措束耐剧玉赵跳哥季课凯胡额款绍卷齐"
           "伟蒸殖永宗苗川炉岩弱零杨奏沿露杆探滑镇饭浓航怀赶库夺伊灵税途灭赛归召鼓播盘裁险康唯录菌纯"
           "借糖盖横符私努堂域枪润幅哈竟熟虫泽脑壤碳欧遍侧寨敢彻虑斜薄庭纳弹饲伸折麦湿暗荷瓦塞床筑恶"
           "户访塔奇透梁刀旋迹卡氯遇份毒泥退洗摆灰彩卖耗夏择忙铜献硬予繁圈雪函亦抽篇阵阴丁尺追堆雄迎"
           "泛爸楼避谋吨野猪旗累偏典馆索秦脂潮爷豆忽托惊塑遗愈朱替纤粗倾尚痛楚谢奋购磨君池旁碎骨监捕"
           "弟暴割贯殊释词亡壁顿宝午尘闻揭炮残冬桥妇警综招吴付浮遭徐您摇谷赞箱隔订男吹园纷唐败宋玻巨"
           "耕坦荣闭湾键凡驻锅救恩剥凝碱齿截炼麻纺禁废盛版缓净睛昌婚涉筒嘴插岸朗庄街藏姑贸腐奴啦惯乘"
           "伙恢匀纱扎辩耳彪臣亿璃抵脉秀萨俄网舞店喷纵寸汗挂洪贺闪柬爆烯津稻墙软勇像滚厘蒙芳肯坡柱荡"
           "腿仪旅尾轧冰贡登黎削钻勒逃障氨郭峰币港伏轨亩毕擦莫刺浪秘援株健售股岛甘泡睡童铸汤阀休汇舍"
           "牧绕炸哲磷绩朋淡尖启陷柴呈徒颜泪稍忘泵蓝拖洞授镜辛壮锋贫虚弯摩泰幼廷尊窗纲弄隶疑氏宫姐震"
           "瑞怪尤琴循描膜违夹腰缘珠穷森枝竹沟催绳忆邦剩幸浆栏拥牙贮礼滤钠纹罢拍咱喊袖埃勤罚焦潜伍墨")
_JA = ("あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをん"
       "データベースセッションメッセージエラー検索保存復元設定確認実行完了失敗成功接続")
_TOOLS = ("terminal", "read_file", "write_file", "search_files", "web_search", "browser",
          "execute_code", "memory", "todo", "patch")
_LEVELS = ("INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR")


class _Gen:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.en_w = [1.0 / (i + 1) ** 0.8 for i in range(len(_EN))]
        self.call = 0

    def words(self, lo: int, hi: int) -> str:
        return " ".join(self.rng.choices(_EN, weights=self.en_w, k=self.rng.randint(lo, hi)))

    def sentence_en(self) -> str:
        s = self.words(5, 22)
        return s[0].upper() + s[1:] + self.rng.choice(".?.!.")

    def sentence_cjk(self, ja: bool) -> str:
        pool = _JA if ja else _CJK_ZH
        n = self.rng.randint(8, 40)
        return "".join(self.rng.choices(pool, k=n)) + ("。" if not ja else "です。")

    def text(self, cjk: str | None, lo: int, hi: int) -> str:
        n = self.rng.randint(lo, hi)
        if cjk:
            return "".join(self.sentence_cjk(cjk == "ja") for _ in range(n))
        return " ".join(self.sentence_en() for _ in range(n))

    def tool_output(self) -> str:
        """Command output of 300 B to 60 KB (log-normal): log lines, JSON, source or a listing."""
        size = int(min(60_000, max(300, self.rng.lognormvariate(math.log(2500), 1.0))))
        kind = self.rng.random()
        r = self.rng
        if kind < 0.4:
            make, sep, wrap = (lambda: f"2025-{r.randint(1, 12):02d}-{r.randint(1, 28):02d} "
                               f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:"
                               f"{r.randint(0, 59):02d} {r.choice(_LEVELS)} "
                               f"worker[{r.randint(100, 999)}]: {self.words(3, 12)} "
                               f"in {r.randint(1, 900)}ms"), "\n", "{}"
        elif kind < 0.65:
            make, sep, wrap = (lambda: json.dumps({
                "id": r.randint(1, 10**6), "name": self.words(1, 3),
                "status": r.choice(("ok", "failed", "pending")),
                "latency_ms": round(r.random() * 500, 2),
                "tags": self.words(1, 4).split()})), ",\n", "[{}]"
        elif kind < 0.85:
            make, sep, wrap = (lambda: f"def {r.choice(_EN)}_{r.choice(_EN)}(value, "
                               f"retries={r.randint(1, 9)}):\n"
                               f"    \"\"\"{self.sentence_en()}\"\"\"\n"
                               f"    for attempt in range(retries):\n"
                               f"        result = {r.choice(_EN)}.{r.choice(_EN)}(value)\n"
                               f"        if result:\n            return result\n"
                               f"    return None\n"), "\n", "{}"
        else:
            make, sep, wrap = (lambda: f"-rw-r--r-- 1 user user {r.randint(10, 10**7):>9} Dec "
                               f"{r.randint(1, 28):2d} {r.randint(0, 23):02d}:"
                               f"{r.randint(0, 59):02d} {r.choice(_EN)}_{r.choice(_EN)}."
                               f"{r.choice(('py', 'md', 'json', 'log'))}"), "\n", "{}"
        parts: list[str] = []
        n = 0
        while n < size:
            item = make()
            parts.append(item)
            n += len(item) + len(sep)
        return wrap.format(sep.join(parts))

    def tool_call(self, name: str) -> dict:
        self.call += 1
        args = {"command": f"{self.rng.choice(_EN)} --{self.rng.choice(_EN)} {self.words(1, 4)}"}
        return {"id": f"call_{self.call:08d}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)}}


def _session(g: _Gen, k: int, turns: int) -> tuple[tuple, list[tuple]]:
    """One session row and its message rows (column order of :data:`_MSG_SQL`)."""
    r = g.rng
    sid = f"s{k:05d}"
    source = r.choice(("cli", "cli", "telegram", "telegram", "discord", "slack", "cron"))
    cjk = None
    if r.random() < 0.10:
        cjk = "ja" if r.random() < 0.3 else "zh"
    span = min(364.0, turns * r.uniform(0.002, 0.02))  # days the session lasts
    started = EPOCH_END - r.uniform(span, 365.0) * DAY
    t = started
    rows: list[tuple] = []
    tool_calls = 0
    for _ in range(turns):
        t += r.uniform(5, 600)
        rows.append((sid, "user", g.text(cjk, 1, 4), None, None, None, t, None))
        t += r.uniform(2, 60)
        calls = [g.tool_call(r.choice(_TOOLS)) for _ in range(r.choice((0, 0, 1, 1, 2, 3)))]
        reasoning = g.text(None, 1, 3) if r.random() < 0.3 else None
        rows.append((sid, "assistant", g.text(cjk, 1, 6), json.dumps(calls) if calls else None,
                     None, None, t, reasoning))
        for call in calls:
            t += r.uniform(0.1, 30)
            rows.append((sid, "tool", g.tool_output(), None, call["function"]["name"],
                         call["id"], t, None))
        tool_calls += len(calls)
    ended = t + r.uniform(10, 3600) if r.random() < 0.95 else None
    if ended is not None and ended > EPOCH_END:
        ended = EPOCH_END
    parent = f"s{r.randrange(k):05d}" if k and r.random() < 0.05 else None
    title = (g.words(2, 6) if not cjk else g.sentence_cjk(cjk == "ja")[:20]) + f" #{k}"
    session = (sid, source, "bench-model", title, parent, started, ended,
               "user_exit" if ended else None, len(rows), tool_calls)
    return session, rows


_SESSION_SQL = ("INSERT INTO sessions (id, source, model, title, parent_session_id, started_at, "
                "ended_at, end_reason, message_count, tool_call_count) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
_MSG_SQL = ("INSERT INTO messages (session_id, role, content, tool_calls, tool_name, "
            "tool_call_id, timestamp, reasoning) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")


def build(path: Path, target_bytes: int, seed: int = 18, progress=None) -> dict:
    """Write a new store at ``path`` until ``state.db`` is at least ``target_bytes``.

    Args:
        progress: called as ``progress(bytes_now, target_bytes)`` after each batch, or None.
    Returns:
        ``{"sessions", "messages", "bytes", "build_s", "largest_session", "seed"}``.
    Raises:
        FileExistsError: ``path`` exists.
    """
    if path.exists():
        raise FileExistsError(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    g = _Gen(seed)
    t0 = time.perf_counter()
    k = 0
    n_msgs = 0
    longest = 0  # turns of session s00000, the longest
    batch_bytes = max(1 << 20, min(16 << 20, target_bytes // 64))
    with SessionDB(path) as db:
        while True:
            sessions, messages, size = [], [], 0
            while size < batch_bytes:
                if k == 0:
                    turns = longest = max(30, min(4000, target_bytes // 250_000))
                elif g.rng.random() < 1 / 400:
                    turns = g.rng.randint(min(200, longest - 1), min(1200, longest - 1))
                else:
                    turns = max(1, min(longest - 1,
                                       int(g.rng.lognormvariate(math.log(12), 0.9))))
                s, rows = _session(g, k, turns)
                sessions.append(s)
                messages += rows
                size += sum(len(m[2]) + len(m[3] or "") + len(m[7] or "") for m in rows)
                k += 1

            def fn(c: sqlite3.Connection, sessions=sessions, messages=messages) -> None:
                c.executemany(_SESSION_SQL, sessions)
                c.executemany(_MSG_SQL, messages)

            db._write(fn, op="bench_fill")
            n_msgs += len(messages)
            db.checkpoint("PASSIVE")
            now = path.stat().st_size
            if progress:
                progress(now, target_bytes)
            if now >= target_bytes:
                break
        db.checkpoint("TRUNCATE")
    return {"sessions": k, "messages": n_msgs, "bytes": path.stat().st_size,
            "build_s": time.perf_counter() - t0, "largest_session": "s00000", "seed": seed}


def cached(cache: Path, megabytes: int, seed: int = 18, progress=None) -> tuple[Path, dict]:
    """The store of ``megabytes`` MiB under ``cache`` (built on first use).

    Keyed by size, seed, generator version and schema version; built in a temporary name and
    renamed when complete, so an interrupted build is never used. ``info.json`` beside it has
    what :func:`build` returned.

    Returns:
        ``(path of state.db, info dict)``; ``info["built_now"]`` says whether this call built it.
    """
    from hermes_state.schema.tables import SCHEMA_VERSION

    d = cache / f"bigstore-{megabytes}MB-s{seed}-g{GENERATOR_VERSION}-v{SCHEMA_VERSION}"
    path = d / "state.db"
    info_path = d / "info.json"
    if path.exists() and info_path.exists():
        return path, {**json.loads(info_path.read_text()), "built_now": False}
    tmp = cache / f"{d.name}.building-{os.getpid()}"
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    info = build(tmp / "state.db", megabytes << 20, seed=seed, progress=progress)
    for suffix in ("-wal", "-shm"):
        Path(f"{tmp}/state.db{suffix}").unlink(missing_ok=True)
    (tmp / "info.json").write_text(json.dumps(info, indent=1) + "\n")
    shutil.rmtree(d, ignore_errors=True)
    os.replace(tmp, d)
    return path, {**info, "built_now": True}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="new state.db path")
    ap.add_argument("--mb", type=int, default=1024, help="target size in MiB (default 1024)")
    ap.add_argument("--seed", type=int, default=18)
    args = ap.parse_args(argv)

    def progress(now: int, target: int) -> None:
        print(f"\r  {now / 2**20:,.0f} / {target / 2**20:,.0f} MiB", end="", file=sys.stderr,
              flush=True)

    info = build(args.out, args.mb << 20, seed=args.seed, progress=progress)
    print(file=sys.stderr)
    print(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
