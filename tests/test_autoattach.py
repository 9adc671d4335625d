"""Callbacks reach every Model.train / Model.fit of a script that never mentions them."""
import pytest

from project import run_python

pytestmark = pytest.mark.mindspore

RECORDER = """
        from mindspore.train import Callback
        calls = []
        class Recorder(Callback):
            def on_train_step_end(self, run_context):
                calls.append(run_context.original_args().cur_step_num)
"""


def test_registered_before_mindspore_import_reaches_train_and_fit():
    proc = run_python("""
        import sys
        from msdebug_hooks import autoattach
        made = []
        def factory():
            from mindspore.train import Callback
            class Recorder(Callback):
                def on_train_step_end(self, run_context):
                    made.append(run_context.original_args().cur_step_num)
            return [Recorder()]
        autoattach.register(factory)
        assert "mindspore" not in sys.modules
        from lenet import make_model, make_dataset
        model, _ = make_model()
        model.train(1, make_dataset(3))
        print("train", made)
        made.clear()
        model.fit(1, make_dataset(2), callbacks=[])
        print("fit", made)
    """)
    assert "train [1, 2, 3]" in proc.stdout
    assert "fit [1, 2]" in proc.stdout


def test_registered_after_import_patches_once_and_keeps_user_callbacks():
    proc = run_python(RECORDER + """
        from msdebug_hooks import autoattach
        from lenet import make_model, make_dataset
        user = []
        class UserCallback(Callback):
            def on_train_end(self, run_context):
                user.append("end")
        autoattach.register(lambda: [Recorder()])
        autoattach.register(lambda: [Recorder()])   # a second factory: two recorders
        autoattach._install_hook()                   # idempotent: still one wrapper
        model, _ = make_model()
        model.train(1, make_dataset(2), callbacks=UserCallback())
        print(sorted(calls), user)
    """)
    assert "[1, 1, 2, 2] ['end']" in proc.stdout


def test_nothing_happens_without_the_variable():
    proc = run_python("""
        import sys
        import mindspore.train.model as model_module
        print(getattr(model_module.Model._train, "_msdebug_hooks_patched", False), "msdebug_hooks" in sys.modules)
    """, env={"ENABLE_MS_DEBUGGER": ""})
    assert proc.stdout.strip() == "False False"


def test_pth_line_installs_the_hook_only_when_enabled(tmp_path):
    """Run the shipped .pth exactly as site.py does at start-up, with the variable set and unset."""
    import shutil
    from project import ROOT

    shutil.copy(ROOT / "msdebug_hooks_autoattach.pth", tmp_path)
    code = f"""
        import site, sys
        site.addsitedir({str(tmp_path)!r})
        from msdebug_hooks import autoattach
        hooked = any(isinstance(f, autoattach._ModelImportHook) for f in sys.meta_path)
        print(hooked, "mindspore" in sys.modules)
    """
    # any other value installs the hook too, so that the first Model.train refuses it in one line (not ignored)
    for value, expected in (("1", "True False"), ("True", "True False"), ("", "False False"), ("0", "False False"),
                            ("FALSE", "False False"), ("yes", "True False")):
        proc = run_python(code, env={"ENABLE_MS_DEBUGGER": value})
        assert proc.stdout.strip() == expected, value


def test_wheel_installs_the_pth_into_site_packages(tmp_path):
    import subprocess
    import sys
    import zipfile
    from project import ROOT

    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    wheel = next(tmp_path.glob("msdebug_hooks-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.endswith("site-packages/msdebug_hooks_autoattach.pth")
               or n.endswith(".data/purelib/msdebug_hooks_autoattach.pth") for n in names), names


def test_a_callback_with_the_same_role_is_not_added_twice():
    """The user passed a debugger explicitly: the env-made one (another class, same role) stays out."""
    proc = run_python(RECORDER + """
        from msdebug_hooks import autoattach
        from lenet import make_model, make_dataset

        class ExplicitDebugger(Recorder):
            autoattach_role = "debugger"

        class EnvDebugger(Callback):
            autoattach_role = "debugger"
            def on_train_step_end(self, run_context):
                calls.append("env")

        autoattach.register(lambda: [EnvDebugger()])
        model, _ = make_model()
        model.train(1, make_dataset(2), callbacks=[ExplicitDebugger()])
        print(calls)
        calls.clear()
        model.train(1, make_dataset(2))
        print(calls)
    """)
    assert proc.stdout.splitlines()[:2] == ["[1, 2]", "['env', 'env']"]


def test_env_callbacks_run_before_the_scripts_own_at_every_step_end():
    """The debugger must see a step before a script callback (LossMonitor on a NaN loss) can end the job."""
    proc = run_python(RECORDER + """
        from msdebug_hooks import autoattach
        from lenet import make_model, make_dataset

        class UserCallback(Callback):
            def on_train_step_end(self, run_context):
                calls.append("user")

        class EnvCallback(Callback):
            def on_train_step_end(self, run_context):
                calls.append("env")

        autoattach.register(lambda: [EnvCallback()])
        model, _ = make_model()
        model.train(1, make_dataset(2), callbacks=[UserCallback()])
        print(calls)
    """)
    assert proc.stdout.strip().splitlines()[-1] == "['env', 'user', 'env', 'user']"
